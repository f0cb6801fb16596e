"""numpy in and out of hal through DLPack, without copies."""
import ctypes
import gc
import threading
import time
import weakref

import hal
import numpy as np
import pytest

_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype = ctypes.c_char_p
_name.argtypes = [ctypes.py_object]


def capsule_name(capsule):
    return _name(capsule).decode()


def test_numpy_to_hal_to_numpy_is_the_same_memory():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = hal.from_dlpack(a)
    assert t.shape == (2, 3, 4) and t.strides == (12, 4, 1) and t.dtype == "f32" and t.ndim == 3
    assert t.device == hal.runtime().device("host:0")
    assert t.__dlpack_device__() == (1, 0)
    assert t.data_ptr == a.ctypes.data
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data and np.shares_memory(a, b)
    a[1, 2, 3] = -5.0  # written through numpy, seen through hal's export
    assert b[1, 2, 3] == -5.0
    b[0, 0, 0] = 7.0  # and back
    assert a[0, 0, 0] == 7.0


def test_strided_views_keep_their_strides():
    a = np.zeros((4, 6, 8), dtype=np.float32)
    view = a.transpose(2, 0, 1)[:, 1:3]
    t = hal.from_dlpack(view)
    assert t.shape == view.shape
    assert t.strides == tuple(s // 4 for s in view.strides)
    back = np.from_dlpack(t)
    assert back.strides == view.strides and back.ctypes.data == view.ctypes.data
    back[...] = 3.0
    assert np.all(a[1:3] == 3.0) and a.sum() == 3.0 * back.size


@pytest.mark.parametrize("np_dtype, hal_dtype", [(np.float32, "f32"), (np.float16, "f16"), (np.float64, "f64"),
                                                 (np.int8, "i8"), (np.uint8, "u8"), (np.int32, "i32"),
                                                 (np.int64, "i64")])
def test_dtypes(np_dtype, hal_dtype):
    a = np.arange(5).astype(np_dtype)
    t = hal.from_dlpack(a)
    assert t.dtype == hal_dtype and t.itemsize == np.dtype(np_dtype).itemsize
    assert np.from_dlpack(t).dtype == np_dtype


def test_capsule_kinds_and_consumption():
    t = hal.from_dlpack(np.ones(3, dtype=np.float32))
    legacy = t.__dlpack__()
    assert capsule_name(legacy) == "dltensor"
    versioned = t.__dlpack__(max_version=(1, 0))
    assert capsule_name(versioned) == "dltensor_versioned"
    assert capsule_name(t.__dlpack__(max_version=(0, 8))) == "dltensor"
    u = hal.from_dlpack(versioned)
    assert capsule_name(versioned) == "used_dltensor_versioned"
    assert u.data_ptr == t.data_ptr
    hal.from_dlpack(legacy)
    assert capsule_name(legacy) == "used_dltensor"
    with pytest.raises(hal.InvalidArgumentError, match="consumed only once"):
        hal.from_dlpack(versioned)


def test_numpy_consumes_hal_capsules_and_marks_them_used():
    t = hal.from_dlpack(np.ones(3, dtype=np.float32))

    class Producer:
        def __init__(self):
            self.capsules = []

        def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
            capsule = t.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
            self.capsules.append(capsule)
            return capsule

        def __dlpack_device__(self):
            return t.__dlpack_device__()

    producer = Producer()
    np.from_dlpack(producer)
    assert capsule_name(producer.capsules[-1]).startswith("used_")


def test_memory_lives_until_the_last_holder_lets_go():
    a = np.ones(1000, dtype=np.float32)
    alive = weakref.ref(a)
    t = hal.from_dlpack(a)
    del a
    gc.collect()
    assert alive() is not None  # hal holds the producer's tensor
    unconsumed = t.__dlpack__(max_version=(1, 0))
    del t
    gc.collect()
    assert alive() is not None  # the capsule holds hal's reference
    del unconsumed  # never consumed: its destructor calls the deleter
    gc.collect()
    assert alive() is None


def test_legacy_producers_without_max_version():
    a = np.arange(6, dtype=np.float32)

    class Legacy:
        calls = []

        def __dlpack__(self, stream=None):
            Legacy.calls.append(stream)
            return a.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    t = hal.from_dlpack(Legacy())
    assert Legacy.calls == [None]
    assert t.data_ptr == a.ctypes.data and t.shape == (6,)


def test_read_only_arrays_are_flagged():
    a = np.ones(4, dtype=np.float32)
    a.flags.writeable = False
    t = hal.from_dlpack(a)
    assert t.read_only
    with pytest.raises(BufferError):
        t.__dlpack__()  # the pre-1.0 form cannot carry the flag


def test_copy_and_device_requests():
    a = np.arange(4, dtype=np.float32)
    t = hal.from_dlpack(a)
    copied = np.from_dlpack(t, copy=True)
    assert not np.shares_memory(copied, a) and np.array_equal(copied, a)
    same = np.from_dlpack(t, copy=False)
    assert np.shares_memory(same, a)
    with pytest.raises(BufferError, match="not the dl_device"):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))


def test_empty_allocated_by_hal():
    t = hal.empty((3, 5), "f32")
    assert t.shape == (3, 5) and t.strides == (5, 1) and t.size == 15
    a = np.from_dlpack(t)
    a[...] = 2.5
    assert np.from_dlpack(t).sum() == 2.5 * 15
    zero = np.from_dlpack(hal.empty((0, 4), "f16"))
    assert zero.shape == (0, 4) and zero.dtype == np.float16


def test_bad_inputs_raise_hal_errors_with_hals_message():
    with pytest.raises(hal.InvalidArgumentError, match="has no hal::DType") as caught:
        hal.from_dlpack(np.zeros(3, dtype=np.complex64))
    assert caught.value.code == hal.StatusCode.invalid_argument
    with pytest.raises(hal.InvalidArgumentError, match="non-negative strides"):
        hal.from_dlpack(np.arange(4, dtype=np.float32)[::-1])
    with pytest.raises(hal.InvalidArgumentError, match="does not implement __dlpack__"):
        hal.from_dlpack([1.0, 2.0])
    with pytest.raises(hal.InvalidArgumentError, match="expected a DLPack capsule"):
        hal._hal._from_capsule(hal.runtime(), 42)
    with pytest.raises(hal.InvalidArgumentError, match="'float128'|float128"):
        hal.empty((2,), "float128")


def _occupy(stream):
    """Starts a long attention call on `stream` from another thread and returns that thread once the call runs.
    hal runs a call on an idle host stream on the calling thread; one enqueued while it runs is queued behind it,
    so a call the test makes next returns before its work is done."""
    rng = np.random.default_rng(11)
    big = tuple(rng.standard_normal((1, 8, 8192, 64), dtype=np.float32) for _ in range(3))  # about a second
    thread = threading.Thread(target=lambda: hal.attention_forward(*big, stream=stream))
    thread.start()
    while stream.is_idle and thread.is_alive():
        time.sleep(0.0005)
    return thread


def _queued_attention(device, stream):
    """An attention call into a new hal.Tensor, queued on `stream` behind a long one; returns the output (its work
    not done yet) and what it must hold once done."""
    rng = np.random.default_rng(7)
    shape = (1, 8, 256, 64)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    expected = np.from_dlpack(hal.attention_forward(q, k, v))
    thread = _occupy(stream)
    out = hal.empty(shape, "f32", device)
    hal.attention_forward(q, k, v, out=out, stream=stream)
    assert not stream.is_idle, "the test needs the work still queued when __dlpack__ runs"
    return out, expected, thread


def test_dlpack_hands_out_memory_only_after_hals_queued_work_on_it():
    # A call given a stream returns before its work runs; the consumer (numpy reads on the host) must not see the
    # memory before that work is done: __dlpack__ waits for it.
    device = hal.runtime().device("host:0")
    stream = device.create_stream()
    out, expected, thread = _queued_attention(device, stream)
    got = np.from_dlpack(out)
    np.testing.assert_array_equal(got, expected)
    thread.join()


def test_dlpack_stream_minus_one_means_the_consumer_orders_itself():
    device = hal.runtime().device("host:0")
    stream = device.create_stream()
    out, expected, thread = _queued_attention(device, stream)
    out.__dlpack__(stream=-1, max_version=(1, 0))  # no wait
    assert not stream.is_idle
    stream.synchronize()
    thread.join()
    np.testing.assert_array_equal(np.from_dlpack(out), expected)
    # A copy is made of the finished data, also when the work is still queued.
    out2, expected2, thread2 = _queued_attention(device, stream)
    copied = np.from_dlpack(out2, copy=True)
    np.testing.assert_array_equal(copied, expected2)
    thread2.join()


def test_dlpack_stream_argument_is_checked():
    t = hal.from_dlpack(np.zeros(4, dtype=np.float32))
    with pytest.raises(BufferError, match="stream=5 for a tensor the host reads"):
        t.__dlpack__(stream=5)
    with pytest.raises(BufferError, match="stream must be an int or None, not <class 'str'>"):
        t.__dlpack__(stream="default")
    assert capsule_name(t.__dlpack__(stream=None)) == "dltensor"


def test_queued_work_keeps_its_operands_alive():
    # numpy arguments are imported for the call alone; hal holds them until the queued work has run, then lets go.
    device = hal.runtime().device("host:0")
    stream = device.create_stream()
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 8, 256, 64), dtype=np.float32) for _ in range(3))
    expected = np.from_dlpack(hal.attention_forward(q, k, v))
    out = hal.empty(q.shape, "f32", device)
    thread = _occupy(stream)
    hal.attention_forward(q, k, v, out=out, stream=stream)
    assert not stream.is_idle, "the test needs the work still queued"
    held = [weakref.ref(a) for a in (q, k, v)]
    del q, k, v
    gc.collect()
    assert all(ref() is not None for ref in held)  # released at hal's next call after the work, not before
    stream.synchronize()
    thread.join()
    gc.collect()
    assert all(ref() is None for ref in held)
    np.testing.assert_array_equal(np.from_dlpack(out), expected)
