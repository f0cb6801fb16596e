"""The runtime, backends, devices, streams, events and error mapping."""
import hal
import pytest


def test_default_runtime_is_process_wide_and_has_the_host():
    assert hal.runtime() is hal.runtime()
    ids = [device.id for device in hal.runtime().devices]
    assert "host:0" in ids
    assert repr(hal.runtime().device("host:0")) == "<hal.Device host:0>"


def test_a_second_runtime_sees_the_same_devices():
    other = hal.Runtime()
    assert [d.id for d in other.devices] == [d.id for d in hal.runtime().devices]


def test_backends_report_state_reason_and_paths():
    reports = {report.name: report for report in hal.runtime().backends}
    assert set(hal.known_backend_names()) <= set(reports)
    host = reports["host"]
    assert host.state == "loaded"
    assert host.path.endswith("libhal_backend_host.so")
    # The plugin is found beside libhal inside the installed package.
    assert "/hal/lib/hal/backends/" in host.path
    assert host.device_count >= 1
    for report in reports.values():
        assert report.state in ("loaded", "unavailable", "error", "disabled")
        assert isinstance(report.paths_tried, list)
        if report.state == "unavailable":
            assert report.reason, f"{report.name} is unavailable without a reason"


def test_device_info():
    device = hal.runtime().device("host:0")
    info = device.info
    assert info.backend == "host" and info.index == 0 and info.type == "cpu"
    assert isinstance(info.name, str) and info.name
    assert isinstance(info.vendor, str) and isinstance(info.uuid, str) and isinstance(info.pci_bus_id, str)
    assert info.total_memory > 0
    assert isinstance(info.version_axes, dict) and "backend" in info.version_axes
    capabilities = info.capabilities
    assert capabilities["attention.math"] is True
    assert capabilities["attention.fused"] is False
    assert device.supports("attention.flash")
    assert device.dlpack_device == (1, 0)
    assert device == hal.runtime().devices[0] and hash(device) == hash(hal.runtime().devices[0])


def test_unknown_device_id_lists_the_ids_there_are():
    with pytest.raises(hal.InvalidArgumentError) as caught:
        hal.runtime().device("nope:7")
    assert "host:0" in str(caught.value)
    assert caught.value.code == hal.StatusCode.invalid_argument
    assert caught.value.message == str(caught.value)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, hal.Error)
    assert hal.runtime().find_device("nope:7") is None


def test_a_dlpack_device_hal_has_not_loaded_is_not_present():
    if any(d.backend == "cuda" for d in hal.runtime().devices):
        pytest.skip("a CUDA device is loaded")
    with pytest.raises(hal.NotPresentError) as caught:
        hal.runtime().find_dlpack_device(2, 0)
    assert "host:0" in str(caught.value)


def test_error_hierarchy():
    for name, code, builtin in [
        ("InvalidArgumentError", "invalid_argument", ValueError),
        ("UnsupportedError", "unsupported", NotImplementedError),
        ("NotPresentError", "not_present", None),
        ("OutOfMemoryError", "out_of_memory", MemoryError),
        ("TimeoutError", "timeout", TimeoutError),
        ("DeviceLostError", "device_lost", None),
        ("AbortedError", "aborted", None),
        ("InternalError", "internal", None),
    ]:
        cls = getattr(hal, name)
        assert issubclass(cls, hal.Error) and issubclass(cls, Exception)
        assert cls.__module__ == "hal" and cls.__name__ == name
        if builtin is not None:
            assert issubclass(cls, builtin)
        assert getattr(hal.StatusCode, code).name == code


def test_host_streams_have_no_native_handle():
    device = hal.runtime().device("host:0")
    stream = device.create_stream()
    with pytest.raises(hal.UnsupportedError) as caught:
        stream.native_handle
    assert "host backend" in str(caught.value)
    assert caught.value.code == hal.StatusCode.unsupported
    with pytest.raises(hal.UnsupportedError):
        device.wrap_native_stream(0)
    with pytest.raises(hal.UnsupportedError):
        device.create_event().native_handle


def test_stream_and_event_order_and_timing():
    device = hal.runtime().device("host:0")
    stream = device.create_stream()
    start, end = device.create_event(), device.create_event()
    stream.record(start)
    stream.record(end)
    end.synchronize()
    stream.synchronize()
    assert start.is_complete and end.is_complete and stream.is_idle
    assert hal.Event.elapsed_milliseconds(start, end) >= 0.0
    assert stream.device == device and "host:0" in repr(stream)


def test_stubs_are_shipped():
    import pathlib

    package = pathlib.Path(hal.__file__).parent
    stub = package / "_hal.pyi"
    assert stub.is_file() and (package / "py.typed").is_file()
    text = stub.read_text()
    assert "class Tensor" in text and "def __dlpack__" in text and "class AttentionParams" in text


def test_the_extension_links_no_vendor_library():
    import glob
    import pathlib
    import shutil
    import subprocess

    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    package = pathlib.Path(hal.__file__).parent
    (extension,) = glob.glob(str(package / "_hal*.so"))
    for library in (extension, str(package / "lib" / "libhal.so")):
        dynamic = subprocess.run(["readelf", "-d", library], check=True, capture_output=True, text=True).stdout
        needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
        assert needed, library
        vendor = [n for n in needed if any(v in n for v in ("cuda", "cudnn", "cublas", "nccl", "amdhip", "rocm", "hip"))]
        assert not vendor, f"{library} links {vendor}"
    assert "libhal.so.0" in subprocess.run(["readelf", "-d", extension], capture_output=True, text=True).stdout


def test_settings_say_where_each_value_came_from(monkeypatch):
    monkeypatch.setenv("HAL_ATTN_DEBUG", "1")
    monkeypatch.delenv("HAL_COLL_ENGINE", raising=False)
    runtime = hal.Runtime()  # reads the environment now, once
    debug = runtime.setting("attention.debug")
    assert (debug.value, debug.source, debug.environment_variable) == ("true", "HAL_ATTN_DEBUG=1", "HAL_ATTN_DEBUG")
    assert runtime.setting("collectives.engine").source == "built-in default"
    assert "collectives.timeout_seconds" in {s.key for s in runtime.settings}
    monkeypatch.setenv("HAL_ATTN_DEBUG", "0")
    assert runtime.setting("attention.debug").value == "true"  # the runtime keeps what it resolved
    with pytest.raises(hal.InvalidArgumentError, match="no setting \"attention.speed\""):
        runtime.setting("attention.speed")
    monkeypatch.setenv("HAL_ATTN_DEBUG", "sometimes")
    with pytest.raises(hal.InvalidArgumentError, match="HAL_ATTN_DEBUG='sometimes' is not allowed"):
        hal.Runtime()
