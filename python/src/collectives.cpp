// Collectives for Python: the rendezvous store, the launcher's environment
// and a Communicator whose operations take hal.Tensor (so any DLPack tensor,
// see hal/_collectives.py). Element counts come from the tensors and are
// checked here against each operation's rule, so a mismatch is an error that
// names both shapes rather than a short read.
#include <nanobind/stl/chrono.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <hal/collectives.hpp>
#include <hal/dlpack.hpp>
#include <hal/hal.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace hal::python {
namespace {

// (address, shape, strides in elements) of memory its owner keeps alive and
// in place until the call and its stream work are done.
using BorrowedArgument = std::tuple<std::uintptr_t, std::vector<std::int64_t>, std::vector<std::int64_t>>;

// Non-owning hal.Tensors of `dtype` over borrowed memory on a DLPack device,
// through hal::from_dlpack (which checks them as it checks any producer's).
std::vector<hal::Tensor> borrowed_tensors(const hal::Runtime& runtime, std::tuple<int, int> device, hal::DType dtype,
                                          const std::vector<BorrowedArgument>& arguments) {
  struct Borrowed {
    hal::dlpack::DLManagedTensorVersioned managed{};
    std::vector<std::int64_t> shape, strides;
  };
  std::vector<hal::Tensor> tensors;
  tensors.reserve(arguments.size());
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const auto& [address, shape, strides] = arguments[i];
    if (shape.size() != strides.size())
      throw hal::Error(hal::StatusCode::invalid_argument, "a borrowed tensor has " + std::to_string(shape.size()) +
                                                              " extents but " + std::to_string(strides.size()) + " strides");
    auto* borrowed = new Borrowed{{}, shape, strides};
    hal::dlpack::DLManagedTensorVersioned& managed = borrowed->managed;
    managed.version = {hal::dlpack::major_version, hal::dlpack::minor_version};
    managed.manager_ctx = borrowed;
    managed.deleter = [](hal::dlpack::DLManagedTensorVersioned* self) { delete static_cast<Borrowed*>(self->manager_ctx); };
    managed.dl_tensor.data = reinterpret_cast<void*>(address);
    managed.dl_tensor.device = {static_cast<hal::dlpack::DLDeviceType>(std::get<0>(device)), std::get<1>(device)};
    managed.dl_tensor.ndim = static_cast<std::int32_t>(shape.size());
    managed.dl_tensor.dtype = hal::to_dlpack(dtype);
    managed.dl_tensor.shape = borrowed->shape.data();
    managed.dl_tensor.strides = borrowed->strides.data();
    tensors.push_back(hal::from_dlpack(runtime, &managed));  // owns `borrowed` from here, also when it throws
  }
  return tensors;
}

std::chrono::milliseconds milliseconds_of(double seconds, const char* name) {
  if (!(seconds > 0) || seconds > 1e9)
    throw Error(StatusCode::invalid_argument,
                std::string(name) + " is " + std::to_string(seconds) + " s; it must be a positive number of seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

// Collectives move whole buffers: the tensor's elements must be one dense
// run in row-major order (extents of 1 may have any stride).
BufferView dense_view(const Tensor& tensor, std::string_view operation, std::string_view role) {
  const std::vector<std::int64_t> strides = tensor.effective_strides();
  std::int64_t expected = 1;
  for (std::size_t axis = tensor.shape.size(); axis-- > 0;) {
    if (tensor.shape[axis] != 1 && strides[axis] != expected)
      throw Error(StatusCode::invalid_argument,
                  std::string(operation) + ": " + std::string(role) + " of shape " + shape_text(tensor) +
                      " is not contiguous (stride " + std::to_string(strides[axis]) + " on axis " +
                      std::to_string(axis) + ", expected " + std::to_string(expected) +
                      "); collectives need contiguous tensors (torch: .contiguous())");
    expected *= tensor.shape[axis];
  }
  return BufferView(tensor.buffer, tensor.byte_offset);
}

struct Operands {
  std::string_view operation;
  const Communicator& communicator;

  void check_placement(const Tensor& tensor, std::string_view role) const {
    const Device device = communicator.device();
    if (!(tensor.buffer.device() == device))
      throw Error(StatusCode::invalid_argument, std::string(operation) + ": " + std::string(role) + " is on " +
                                                    tensor.buffer.device().id() + " but the communicator's device is " +
                                                    device.id());
    if (tensor.read_only && role != "tensor" && role != "send")
      throw Error(StatusCode::invalid_argument,
                  std::string(operation) + ": " + std::string(role) + " is read-only (its producer said so)");
  }
  void check_same_dtype(const Tensor& send, const Tensor& recv) const {
    if (send.dtype != recv.dtype)
      throw Error(StatusCode::invalid_argument, std::string(operation) + ": send is " + std::string(to_string(send.dtype)) +
                                                    " but recv is " + std::string(to_string(recv.dtype)) +
                                                    "; both must have one dtype");
  }
  // recv holds `factor` times send's elements (or send factor times recv's when inverted).
  void check_counts(const Tensor& send, const Tensor& recv, std::uint64_t send_factor, std::uint64_t recv_factor,
                    const char* rule) const {
    if (send.element_count() * send_factor != recv.element_count() * recv_factor)
      throw Error(StatusCode::invalid_argument, std::string(operation) + ": send has shape " + shape_text(send) +
                                                    " and recv " + shape_text(recv) + "; " + rule + " (world size " +
                                                    std::to_string(communicator.world_size()) + ")");
  }
};

// One entry for every operation with a send and a receive tensor; `root` is
// the root rank (broadcast, reduce, gather, scatter), ignored otherwise.
void run_collective(const Communicator& communicator, const std::string& operation, const Tensor& send,
                    const Tensor& recv, int root, const std::string& op, const Stream& stream, bool synchronize,
                    std::optional<double> timeout_seconds) {
  const Operands operands{operation, communicator};
  operands.check_placement(send, "send");
  operands.check_placement(recv, "recv");
  operands.check_same_dtype(send, recv);
  const auto world = static_cast<std::uint64_t>(communicator.world_size());
  const bool is_root = communicator.rank() == root;
  OperationOptions options;
  if (timeout_seconds) options.timeout = milliseconds_of(*timeout_seconds, "timeout");
  const BufferView send_view = dense_view(send, operation, "send");
  const BufferView recv_view = dense_view(recv, operation, "recv");
  const DType type = send.dtype;
  std::optional<nb::gil_scoped_release> released(std::in_place);  // taken back to note queued work
  if (operation == "all_reduce") {
    operands.check_counts(send, recv, 1, 1, "all_reduce needs as many elements in recv as in send");
    communicator.all_reduce(send_view, recv_view, send.element_count(), type, parse_reduce_op(op), stream, options);
  } else if (operation == "broadcast") {
    operands.check_counts(send, recv, 1, 1, "broadcast needs as many elements in recv as in send");
    communicator.broadcast(send_view, recv_view, send.element_count(), type, root, stream, options);
  } else if (operation == "reduce") {
    operands.check_counts(send, recv, 1, 1, "reduce needs as many elements in recv as in send");
    communicator.reduce(send_view, recv_view, send.element_count(), type, parse_reduce_op(op), root, stream, options);
  } else if (operation == "all_gather") {
    operands.check_counts(send, recv, world, 1, "all_gather's recv holds world size times send's elements");
    communicator.all_gather(send_view, recv_view, send.element_count(), type, stream, options);
  } else if (operation == "reduce_scatter") {
    operands.check_counts(send, recv, 1, world, "reduce_scatter's send holds world size times recv's elements");
    communicator.reduce_scatter(send_view, recv_view, recv.element_count(), type, parse_reduce_op(op), stream, options);
  } else if (operation == "all_to_all") {
    operands.check_counts(send, recv, 1, 1, "all_to_all needs as many elements in recv as in send");
    if (send.element_count() % world != 0)
      throw Error(StatusCode::invalid_argument, "all_to_all: send's " + std::to_string(send.element_count()) +
                                                    " elements do not split into " + std::to_string(world) +
                                                    " equal blocks, one per rank");
    communicator.all_to_all(send_view, recv_view, send.element_count() / world, type, stream, options);
  } else if (operation == "gather") {
    if (is_root) operands.check_counts(send, recv, world, 1, "gather's recv on the root holds world size times send's elements");
    communicator.gather(send_view, recv_view, send.element_count(), type, root, stream, options);
  } else if (operation == "scatter") {
    if (is_root) operands.check_counts(send, recv, 1, world, "scatter's send on the root holds world size times recv's elements");
    communicator.scatter(send_view, recv_view, recv.element_count(), type, root, stream, options);
  } else {
    throw Error(StatusCode::invalid_argument,
                "collective '" + operation +
                    "' is not one of all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter");
  }
  if (synchronize) {
    stream.synchronize();
    return;
  }
  released.reset();
  note_pending_work(stream, {&send, &recv});
}

void run_point_to_point(const Communicator& communicator, const std::string& operation, const Tensor& tensor,
                        int peer, const Stream& stream, bool synchronize, std::optional<double> timeout_seconds) {
  const Operands operands{operation, communicator};
  operands.check_placement(tensor, operation == "recv" ? "recv" : "tensor");
  OperationOptions options;
  if (timeout_seconds) options.timeout = milliseconds_of(*timeout_seconds, "timeout");
  const BufferView view = dense_view(tensor, operation, "tensor");
  std::optional<nb::gil_scoped_release> released(std::in_place);  // taken back to note queued work
  if (operation == "send")
    communicator.send(view, tensor.element_count(), tensor.dtype, peer, stream, options);
  else if (operation == "recv")
    communicator.recv(view, tensor.element_count(), tensor.dtype, peer, stream, options);
  else
    throw Error(StatusCode::invalid_argument, "point-to-point operation '" + operation + "' is not send or recv");
  if (synchronize) {
    stream.synchronize();
    return;
  }
  released.reset();
  note_pending_work(stream, {&tensor});
}

// A hal::Store over three Python callables, so that a communicator can meet
// on a store the framework already runs (torch.distributed's TCPStore or
// FileStore, hal/torch/distributed.py). hal calls them from its own threads
// too (failure reports, the MPI watchdog), so each call takes the GIL; every
// binding that waits on such a thread releases it.
class CallbackStore final : public Store {
 public:
  CallbackStore(nb::callable set, nb::callable get, nb::callable add)
      : set_(std::move(set)), get_(std::move(get)), add_(std::move(add)) {}
  ~CallbackStore() override {
    if (!nb::is_alive()) {  // the interpreter is finalizing: too late to drop references, leave them
      set_.release();
      get_.release();
      add_.release();
      return;
    }
    nb::gil_scoped_acquire gil;
    set_.reset();
    get_.reset();
    add_.reset();
  }
  void set(std::string_view key, std::string_view value) override {
    nb::gil_scoped_acquire gil;
    call("set", key, StatusCode::internal, [&] { set_(key, nb::bytes(value.data(), value.size())); });
  }
  // timeout 0 asks whether the key is there now: a missing key is a timeout.
  std::string get(std::string_view key, std::chrono::milliseconds timeout) override {
    nb::gil_scoped_acquire gil;
    std::string value;
    call("get", key, StatusCode::internal, [&] {
      nb::object result = get_(key, static_cast<double>(timeout.count()) / 1000.0);
      if (result.is_none())
        throw Error(StatusCode::timeout, "store key '" + std::string(key) + "' was not set within " +
                                             std::to_string(timeout.count()) + " ms");
      const auto bytes = nb::cast<nb::bytes>(result);
      value.assign(bytes.c_str(), bytes.size());
    });
    return value;
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    nb::gil_scoped_acquire gil;
    std::int64_t total = 0;
    call("add", key, StatusCode::internal, [&] { total = nb::cast<std::int64_t>(add_(key, delta)); });
    return total;
  }
  using Store::get;

 private:
  // A Python exception becomes a hal::Error naming the key, so that hal's
  // engines (which speak hal_status) report it instead of terminating. A get
  // that found nothing in time returns None: that is the timeout.
  template <typename Call>
  static void call(const char* what, std::string_view key, StatusCode code, Call&& body) {
    try {
      body();
    } catch (nb::python_error& error) {
      throw Error(code, std::string("store ") + what + " of '" + std::string(key) + "' failed: " + error.what());
    }
  }

  nb::callable set_, get_, add_;
};

}  // namespace

std::string shape_text(const Tensor& tensor) {
  std::string text = "(";
  for (std::size_t i = 0; i < tensor.shape.size(); ++i) text += (i ? ", " : "") + std::to_string(tensor.shape[i]);
  return text + (tensor.shape.size() == 1 ? ",)" : ")");
}

void bind_collectives(nb::module_& m) {
  nb::class_<Store>(m, "Store",
                    "A key-value store the ranks of a job share to find each other (hal::Store); values are bytes.")
      .def("set", [](Store& s, const std::string& key, nb::bytes value) {
            s.set(key, std::string_view(value.c_str(), value.size()));
          }, "key"_a, "value"_a)
      .def("get", [](Store& s, const std::string& key, double timeout) {
            std::string value;
            {
              nb::gil_scoped_release release;
              value = s.get(key, milliseconds_of(timeout, "timeout"));
            }
            return nb::bytes(value.data(), value.size());
          }, "key"_a, "timeout"_a = 300.0, "Waits up to timeout seconds for another rank to set the key.")
      .def("add", &Store::add, "key"_a, "delta"_a, "Atomically adds delta to the integer at key; returns the new value.");

  nb::class_<CallbackStore, Store>(m, "_CallbackStore",
                                   "A hal.Store whose set(key, bytes), get(key, timeout_seconds) -> bytes or None and "
                                   "add(key, delta) -> int are Python callables (hal.torch.distributed meets on "
                                   "torch's store through it).")
      .def(nb::init<nb::callable, nb::callable, nb::callable>(), "set"_a, "get"_a, "add"_a);

  nb::class_<Store::FromEnvironment>(m, "LaunchEnvironment",
                                     "What Store.from_environment read: the ranks and the store to meet on.")
      .def_ro("store", &Store::FromEnvironment::store)
      .def_ro("rank", &Store::FromEnvironment::rank)
      .def_ro("world_size", &Store::FromEnvironment::world_size)
      .def_ro("local_rank", &Store::FromEnvironment::local_rank)
      .def_ro("source", &Store::FromEnvironment::source, "Which variables were used, e.g. 'RANK/WORLD_SIZE, TcpStore ...'.")
      .def("__repr__", [](const Store::FromEnvironment& e) {
        return "<hal.LaunchEnvironment rank " + std::to_string(e.rank) + " of " + std::to_string(e.world_size) +
               " (local " + std::to_string(e.local_rank) + "): " + e.source + ">";
      });
  m.def("_launch_environment", [](double connect_timeout) {
        const auto timeout = milliseconds_of(connect_timeout, "connect_timeout");
        nb::gil_scoped_release release;  // rank 0 waits for the others to connect
        return Store::from_environment(timeout);
      }, "connect_timeout"_a = 60.0,
      "Reads the launcher's variables (torchrun, halrun, mpirun, srun; see docs/collectives.md) and connects to the "
      "job's store.");

  nb::class_<Communicator>(m, "_Communicator", "hal::Communicator; use hal.Communicator.")
      .def_static("create", [](const Device& device, int rank, int world_size, std::shared_ptr<Store> store,
                               double timeout, const std::string& engine, std::optional<bool> check) {
            CommunicatorOptions options;
            options.timeout = milliseconds_of(timeout, "timeout");
            options.engine = engine;
            options.check = check;
            nb::gil_scoped_release release;  // waits for every rank
            return Communicator::create(device, rank, world_size, std::move(store), options);
          }, "device"_a, "rank"_a, "world_size"_a, "store"_a, "timeout"_a = 300.0, "engine"_a = "",
          "check"_a = nb::none())
      .def_prop_ro("valid", &Communicator::valid)
      .def_prop_ro("rank", &Communicator::rank)
      .def_prop_ro("world_size", &Communicator::world_size)
      .def_prop_ro("device", &Communicator::device)
      .def_prop_ro("description", &Communicator::description)
      .def("split", [](const Communicator& c, int color, int key) {
            nb::gil_scoped_release release;
            return c.split(color, key);
          }, "color"_a, "key"_a)
      .def("abort", &Communicator::abort, nb::call_guard<nb::gil_scoped_release>())
      .def("destroy", &Communicator::destroy, nb::call_guard<nb::gil_scoped_release>())
      .def("async_error", [](const Communicator& c) { return c.async_error().message(); },
           "The first error of an operation that ran on a stream ('' when none).")
      .def("barrier", [](const Communicator& c, const Stream& stream, bool synchronize) {
            nb::gil_scoped_release release;
            c.barrier(stream);
            if (synchronize) stream.synchronize();
          }, "stream"_a, "synchronize"_a = true)
      .def("run", &run_collective, "operation"_a, "send"_a, "recv"_a, "root"_a, "op"_a, "stream"_a,
           "synchronize"_a = true, "timeout"_a = nb::none())
      // hal.torch.distributed's per-call path: send and recv as (address, shape,
      // strides) on a DLPack device, borrowed for the call, without a DLPack
      // exchange per tensor in Python.
      .def("run_borrowed", [](const Communicator& c, const Runtime& runtime, const std::string& operation,
                              std::tuple<int, int> device, const std::string& dtype, const BorrowedArgument& send,
                              const BorrowedArgument& recv, int root, const std::string& op, const Stream& stream,
                              bool synchronize, std::optional<double> timeout) {
            const auto tensors = borrowed_tensors(runtime, device, require_dtype(dtype), {send, recv});
            run_collective(c, operation, tensors[0], tensors[1], root, op, stream, synchronize, timeout);
          }, "runtime"_a, "operation"_a, "device"_a, "dtype"_a, "send"_a, "recv"_a, "root"_a, "op"_a, "stream"_a,
          "synchronize"_a, "timeout"_a = nb::none())
      .def("run_point_to_point", &run_point_to_point, "operation"_a, "tensor"_a, "peer"_a, "stream"_a,
           "synchronize"_a = true, "timeout"_a = nb::none())
      .def("group_start", &Communicator::group_start)
      .def("group_end", [](const Communicator& c) {
            nb::gil_scoped_release release;
            c.group_end();
          })
      .def("group_cancel", &Communicator::group_cancel);
}

}  // namespace hal::python
