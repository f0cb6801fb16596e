// hal._hal: the Python binding of the hal C++ API (nanobind). Thin glue: the
// Python package (python/hal/__init__.py) adds the DLPack protocol
// negotiation, default streams and the attention helpers that read shapes and
// strides from tensors.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <hal/hal.hpp>

#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// ---------------------------------------------------------------- errors

// The exception classes live in Python (hal/_errors.py, so type checkers see
// them); hal/__init__.py hands them over with _register_errors at import.
PyObject* error_base = nullptr;
std::vector<std::pair<hal::StatusCode, PyObject*>> error_classes;

PyObject* error_class_for(hal::StatusCode code) {
  for (const auto& [known, type] : error_classes)
    if (known == code) return type;
  return error_base != nullptr ? error_base : PyExc_RuntimeError;
}

void set_python_error(const hal::Error& error) {
  PyObject* type = error_class_for(error.code());
  nb::object instance = nb::steal(PyObject_CallFunction(type, "s", error.status().message().c_str()));
  if (!instance.is_valid()) return;  // the call set its own error
  if (type != PyExc_RuntimeError) {
    instance.attr("code") = nb::cast(error.code());
    instance.attr("message") = nb::str(error.status().message().c_str());
    instance.attr("native_code") = nb::int_(error.status().native_code());
  }
  PyErr_SetObject(type, instance.ptr());
}

void register_errors(nb::module_& m) {
  m.def("_register_errors", [](nb::handle base, nb::dict classes) {
        Py_INCREF(base.ptr());
        error_base = base.ptr();
        for (auto [code, type] : classes) {
          Py_INCREF(type.ptr());
          error_classes.emplace_back(nb::cast<hal::StatusCode>(code), type.ptr());
        }
      }, "base"_a, "classes"_a, "Sets the exception classes hal.Error and its subclasses by StatusCode (hal/_errors.py).");
  nb::register_exception_translator([](const std::exception_ptr& pointer, void*) {
    try {
      std::rethrow_exception(pointer);
    } catch (const hal::Error& error) {
      set_python_error(error);
    }
  });
}

// ---------------------------------------------------------------- helpers

nb::object capability_value(const hal::Capability& capability) {
  return std::visit([](const auto& value) -> nb::object { return nb::cast(value); }, capability.value);
}

hal::DType dtype_from(const std::string& text) { return hal::require_dtype(text); }

std::string layout_name(hal::AttentionLayout layout) { return layout == hal::AttentionLayout::bshd ? "bshd" : "bhsd"; }
hal::AttentionLayout layout_from(const std::string& text) {
  if (text == "bshd") return hal::AttentionLayout::bshd;
  if (text == "bhsd") return hal::AttentionLayout::bhsd;
  throw hal::Error(hal::StatusCode::invalid_argument, "layout '" + text + "' is not one of 'bshd', 'bhsd'");
}
std::string alignment_name(hal::MaskAlignment alignment) {
  return alignment == hal::MaskAlignment::top_left ? "top_left" : "bottom_right";
}
hal::MaskAlignment alignment_from(const std::string& text) {
  if (text == "top_left") return hal::MaskAlignment::top_left;
  if (text == "bottom_right") return hal::MaskAlignment::bottom_right;
  throw hal::Error(hal::StatusCode::invalid_argument, "alignment '" + text + "' is not one of 'top_left', 'bottom_right'");
}

using Strides4 = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
std::optional<Strides4> strides_out(const std::optional<hal::TensorStrides>& strides) {
  if (!strides) return std::nullopt;
  return Strides4{strides->batch, strides->head, strides->seq, strides->dim};
}
std::optional<hal::TensorStrides> strides_in(const std::optional<Strides4>& strides) {
  if (!strides) return std::nullopt;
  return hal::TensorStrides{std::get<0>(*strides), std::get<1>(*strides), std::get<2>(*strides), std::get<3>(*strides)};
}

hal::AttentionOptions options_from(const std::optional<std::vector<std::string>>& implementations) {
  hal::AttentionOptions options;
  if (!implementations) return options;
  for (const auto& name : *implementations) {
    const auto implementation = hal::parse_attention_implementation(name);
    if (!implementation)
      throw hal::Error(hal::StatusCode::invalid_argument,
                       "attention implementation '" + name + "' is not one of 'fused', 'flash', 'math'");
    options.implementations.push_back(*implementation);
  }
  return options;
}

hal::TensorRef tensor_ref(const hal::Tensor& tensor) { return {tensor.buffer, tensor.byte_offset}; }
hal::TensorRef tensor_ref(const std::optional<hal::Tensor>& tensor) { return tensor ? tensor_ref(*tensor) : hal::TensorRef{}; }

// ---------------------------------------------------------------- DLPack capsules

constexpr const char* kVersioned = "dltensor_versioned";
constexpr const char* kUsedVersioned = "used_dltensor_versioned";
constexpr const char* kLegacy = "dltensor";
constexpr const char* kUsedLegacy = "used_dltensor";

// Runs when a capsule goes away: a capsule still named "dltensor(_versioned)"
// was never consumed, so its tensor (a Managed) is still ours to delete.
template <typename Managed>
void delete_unconsumed(PyObject* capsule, const char* unconsumed_name) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (PyCapsule_IsValid(capsule, unconsumed_name)) {
    auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(capsule, unconsumed_name));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
  PyErr_Restore(type, value, traceback);
}
void versioned_capsule_destructor(PyObject* capsule) {
  delete_unconsumed<hal::dlpack::DLManagedTensorVersioned>(capsule, kVersioned);
}
void legacy_capsule_destructor(PyObject* capsule) { delete_unconsumed<hal::dlpack::DLManagedTensor>(capsule, kLegacy); }

using hal::python::buffer_error;

std::tuple<int, int> dlpack_device_of(const hal::Tensor& tensor) {
  const hal::NativeDevice native = hal::native_device(tensor.buffer.device());
  int type = native.type;
  const hal::MemoryKind kind = tensor.buffer.kind();
  if (native.type == hal::dlpack::kDLCUDA && kind == hal::MemoryKind::host_pinned) type = hal::dlpack::kDLCUDAHost;
  if (native.type == hal::dlpack::kDLCUDA && kind == hal::MemoryKind::managed) type = hal::dlpack::kDLCUDAManaged;
  if (native.type == hal::dlpack::kDLROCM && kind == hal::MemoryKind::host_pinned) type = hal::dlpack::kDLROCMHost;
  return {type, native.ordinal};
}

// A compact copy of the tensor on the same device (for __dlpack__(copy=True)).
hal::Tensor copy_of(const hal::Tensor& tensor) {
  hal::Tensor copy = tensor;
  const std::uint64_t span = tensor.span_bytes();
  copy.buffer = tensor.buffer.device().allocate(span == 0 ? 1 : span, tensor.buffer.kind());
  copy.byte_offset = 0;
  if (span != 0) copy.buffer.copy_from(0, tensor.buffer, tensor.byte_offset, span);
  copy.read_only = false;
  return copy;
}

nb::object tensor_dlpack(const hal::Tensor& self, nb::object stream, nb::object max_version, nb::object dl_device,
                         nb::object copy) {
  if (!dl_device.is_none()) {
    const auto wanted = nb::cast<std::tuple<int, int>>(dl_device);
    if (wanted != dlpack_device_of(self))
      buffer_error("hal.Tensor.__dlpack__: the tensor is on DLPack device (" + std::to_string(std::get<0>(dlpack_device_of(self))) +
                   ", " + std::to_string(std::get<1>(dlpack_device_of(self))) + "), not the dl_device asked for; hal does not copy across devices");
  }
  const bool make_copy = !copy.is_none() && nb::cast<bool>(copy);
  // The copy is made after hal's queued work on the tensor; it has none of its own.
  if (make_copy) hal::python::wait_for_pending_work(self);
  const hal::Tensor source = make_copy ? copy_of(self) : self;
  hal::python::order_consumer_after_pending_work(source, std::get<0>(dlpack_device_of(source)), stream);
  bool versioned = false;
  if (!max_version.is_none()) {
    const auto version = nb::cast<std::tuple<int, int>>(max_version);
    versioned = std::get<0>(version) >= 1;
  }
  if (versioned) {
    hal::dlpack::DLManagedTensorVersioned* managed = hal::to_dlpack(source);
    if (make_copy) managed->flags |= hal::dlpack::flag_is_copied;
    PyObject* capsule = PyCapsule_New(managed, kVersioned, versioned_capsule_destructor);
    if (capsule == nullptr) {
      managed->deleter(managed);
      throw nb::python_error();
    }
    return nb::steal(capsule);
  }
  if (source.read_only)
    buffer_error("hal.Tensor.__dlpack__: the tensor is read-only and the pre-1.0 DLPack form cannot say so; "
                 "ask for max_version=(1, 0) or later");
  hal::dlpack::DLManagedTensor* managed = hal::to_dlpack_unversioned(source);
  PyObject* capsule = PyCapsule_New(managed, kLegacy, legacy_capsule_destructor);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

// Consumes a "dltensor(_versioned)" capsule: renames it "used_..." (so its
// destructor no longer deletes) and hands the managed tensor to
// hal::from_dlpack, which owns it from then on (and calls the deleter exactly
// once, also when it refuses the tensor).
hal::Tensor tensor_from_capsule(const hal::Runtime& runtime, nb::handle capsule) {
  if (!PyCapsule_CheckExact(capsule.ptr()))
    throw hal::Error(hal::StatusCode::invalid_argument, "from_dlpack: expected a DLPack capsule, got " +
                                                            std::string(nb::type_name(capsule.type()).c_str()));
  if (PyCapsule_IsValid(capsule.ptr(), kVersioned)) {
    auto* managed = static_cast<hal::dlpack::DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), kVersioned));
    if (PyCapsule_SetName(capsule.ptr(), kUsedVersioned) != 0) throw nb::python_error();
    return hal::from_dlpack(runtime, managed);
  }
  if (PyCapsule_IsValid(capsule.ptr(), kLegacy)) {
    auto* managed = static_cast<hal::dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kLegacy));
    if (PyCapsule_SetName(capsule.ptr(), kUsedLegacy) != 0) throw nb::python_error();
    return hal::from_dlpack(runtime, managed);
  }
  const char* name = PyCapsule_GetName(capsule.ptr());
  PyErr_Clear();
  const std::string what = name == nullptr ? "an unnamed capsule" : "a capsule named '" + std::string(name) + "'";
  throw hal::Error(hal::StatusCode::invalid_argument,
                   "from_dlpack: " + what + " is not an unconsumed DLPack tensor ('dltensor' or 'dltensor_versioned'); "
                   "a capsule can be consumed only once");
}

std::string tensor_repr(const hal::Tensor& tensor) {
  std::string device = tensor.buffer.valid() ? tensor.buffer.device().id() : "freed";
  return "<hal.Tensor shape=" + hal::python::shape_text(tensor) + " dtype=" + std::string(hal::to_string(tensor.dtype)) +
         " device=" + device + ">";
}

std::vector<std::string> implementation_names(const std::vector<hal::AttentionImplementation>& implementations) {
  std::vector<std::string> names;
  for (const auto implementation : implementations) names.emplace_back(hal::to_string(implementation));
  return names;
}


// ---------------------------------------------------------------- attention calls

hal::TensorRef borrowed(std::uintptr_t address) { return hal::TensorRef::borrowed(reinterpret_cast<const void*>(address)); }

// An attention call with the GIL released: synchronized, or the tensors it
// reads and writes kept until the stream has passed it (note_pending_work).
template <typename Call>
const hal::AttentionDecision& run_attention(const hal::Stream& stream,
                                            const std::optional<std::vector<std::string>>& implementations,
                                            const std::optional<hal::Tensor>& key_ranges, bool synchronize,
                                            std::initializer_list<const hal::Tensor*> tensors, const Call& call) {
  hal::AttentionOptions options = options_from(implementations);
  options.key_ranges = tensor_ref(key_ranges);
  const hal::AttentionDecision* decision = nullptr;
  {
    nb::gil_scoped_release release;
    decision = &call(options);
    if (synchronize) stream.synchronize();
  }
  if (!synchronize) hal::python::note_pending_work(stream, tensors);
  return *decision;
}

const hal::AttentionDecision& run_forward(const hal::Stream& stream, const hal::AttentionParams& params,
                                          const hal::Tensor& q, const hal::Tensor& k, const hal::Tensor& v,
                                          const hal::Tensor& o, const std::optional<hal::Tensor>& lse,
                                          const std::optional<std::vector<std::string>>& implementations,
                                          const std::optional<hal::Tensor>& key_ranges, bool synchronize) {
  return run_attention(stream, implementations, key_ranges, synchronize,
                       {&q, &k, &v, &o, lse ? &*lse : nullptr, key_ranges ? &*key_ranges : nullptr},
                       [&](const hal::AttentionOptions& options) -> const hal::AttentionDecision& {
                         return hal::attention_forward(stream, params, tensor_ref(q), tensor_ref(k), tensor_ref(v),
                                                       tensor_ref(o), tensor_ref(lse), options);
                       });
}

const hal::AttentionDecision& run_backward(const hal::Stream& stream, const hal::AttentionParams& params,
                                           const hal::Tensor& q, const hal::Tensor& k, const hal::Tensor& v,
                                           const hal::Tensor& o, const hal::Tensor& grad_o, const hal::Tensor& lse,
                                           const hal::Tensor& grad_q, const hal::Tensor& grad_k,
                                           const hal::Tensor& grad_v,
                                           const std::optional<std::vector<std::string>>& implementations,
                                           const std::optional<hal::Tensor>& key_ranges, bool synchronize) {
  return run_attention(stream, implementations, key_ranges, synchronize,
                       {&q, &k, &v, &o, &grad_o, &lse, &grad_q, &grad_k, &grad_v, key_ranges ? &*key_ranges : nullptr},
                       [&](const hal::AttentionOptions& options) -> const hal::AttentionDecision& {
                         return hal::attention_backward(stream, params, tensor_ref(q), tensor_ref(k), tensor_ref(v),
                                                        tensor_ref(o), tensor_ref(grad_o), tensor_ref(lse),
                                                        tensor_ref(grad_q), tensor_ref(grad_k), tensor_ref(grad_v),
                                                        options);
                       });
}

}  // namespace

NB_MODULE(_hal, m) {
  m.doc() = "The hal C++ API for Python (the extension; import hal instead).";
  register_errors(m);

  nb::enum_<hal::StatusCode>(m, "StatusCode", "hal::StatusCode: the code of a hal.Error.")
      .value("ok", hal::StatusCode::ok)
      .value("invalid_argument", hal::StatusCode::invalid_argument)
      .value("unsupported", hal::StatusCode::unsupported)
      .value("not_present", hal::StatusCode::not_present)
      .value("out_of_memory", hal::StatusCode::out_of_memory)
      .value("timeout", hal::StatusCode::timeout)
      .value("device_lost", hal::StatusCode::device_lost)
      .value("aborted", hal::StatusCode::aborted)
      .value("internal", hal::StatusCode::internal);

  // -------------------------------------------------------------- runtime, backends, devices
  nb::class_<hal::BackendReport>(m, "BackendReport", "What the runtime found for one backend.")
      .def_ro("name", &hal::BackendReport::name)
      .def_prop_ro("state", [](const hal::BackendReport& r) { return std::string(hal::to_string(r.state)); },
                   "'loaded', 'unavailable', 'error' or 'disabled'.")
      .def_ro("path", &hal::BackendReport::path, "The plugin that was used, if any.")
      .def_ro("reason", &hal::BackendReport::reason, "Why it is not loaded, and what to do next.")
      .def_ro("paths_tried", &hal::BackendReport::paths_tried, "Every plugin path tried and what happened there.")
      .def_ro("version", &hal::BackendReport::version)
      .def_ro("abi_version", &hal::BackendReport::abi_version)
      .def_ro("device_count", &hal::BackendReport::device_count)
      .def("__repr__", [](const hal::BackendReport& r) {
        return "<hal.BackendReport " + r.name + " " + std::string(hal::to_string(r.state)) + ">";
      });

  nb::class_<hal::DeviceInfo>(m, "DeviceInfo", "A snapshot of a device taken at discovery.")
      .def_ro("backend", &hal::DeviceInfo::backend)
      .def_ro("index", &hal::DeviceInfo::index)
      .def_prop_ro("type", [](const hal::DeviceInfo& i) { return std::string(hal::to_string(i.type)); },
                   "'cpu', 'gpu' or 'accelerator'.")
      .def_ro("name", &hal::DeviceInfo::name)
      .def_ro("vendor", &hal::DeviceInfo::vendor)
      .def_ro("uuid", &hal::DeviceInfo::uuid)
      .def_ro("pci_bus_id", &hal::DeviceInfo::pci_bus_id)
      .def_ro("numa_node", &hal::DeviceInfo::numa_node)
      .def_ro("total_memory", &hal::DeviceInfo::total_memory, "Bytes.")
      .def_ro("compute_units", &hal::DeviceInfo::compute_units)
      .def_ro("clock_mhz", &hal::DeviceInfo::clock_mhz)
      .def_ro("memory_clock_mhz", &hal::DeviceInfo::memory_clock_mhz)
      .def_prop_ro("version_axes", [](const hal::DeviceInfo& i) {
            nb::dict axes;
            for (const auto& [axis, version] : i.version_axes) axes[nb::str(axis.c_str())] = nb::str(version.c_str());
            return axes;
          }, "Each version axis on its own: {'driver': ..., 'runtime': ..., library: ...}.")
      .def_prop_ro("capabilities", [](const hal::DeviceInfo& i) {
            nb::dict capabilities;
            for (const auto& capability : i.capabilities) capabilities[nb::str(capability.key.c_str())] = capability_value(capability);
            return capabilities;
          }, "Declared capabilities: {'attention.flash': True, ...} (bool, int, float or str values).")
      .def_prop_ro("capability_notes", [](const hal::DeviceInfo& i) {
            nb::dict notes;
            for (const auto& capability : i.capabilities) notes[nb::str(capability.key.c_str())] = nb::str(capability.note.c_str());
            return notes;
          }, "Why each capability has its value, or where it came from.")
      .def("__repr__", [](const hal::DeviceInfo& i) { return "<hal.DeviceInfo " + i.backend + ":" + std::to_string(i.index) + " " + i.name + ">"; });

  nb::class_<hal::Device>(m, "Device", "One device of a loaded backend; from Runtime.devices or Runtime.device().")
      .def_prop_ro("id", &hal::Device::id, "'host:0', 'cuda:1', ...")
      .def_prop_ro("backend", [](const hal::Device& d) { return d.backend_name(); })
      .def_prop_ro("index", &hal::Device::index)
      .def_prop_ro("info", [](const hal::Device& d) { return d.info(); }, "The DeviceInfo taken at discovery.")
      .def_prop_ro("free_memory", [](const hal::Device& d) { nb::gil_scoped_release release; return d.free_memory(); },
                   "Free memory in bytes, read now.")
      .def("supports", &hal::Device::supports, "capability"_a, "True when the capability is declared as a true bool.")
      .def("create_stream", &hal::Device::create_stream, "A new in-order stream on this device.")
      .def("create_event", &hal::Device::create_event, "A new event on this device.")
      .def("wrap_native_stream", [](const hal::Device& d, std::uintptr_t handle, bool owned) {
            return d.wrap_native_stream({reinterpret_cast<void*>(handle), owned});
          }, "handle"_a, "owned"_a = false,
          "A hal.Stream over another library's stream (torch.cuda.current_stream().cuda_stream); 0 is the legacy "
          "default stream. Raises hal.UnsupportedError on the host backend.")
      .def_prop_ro("dlpack_device", [](const hal::Device& d) {
            const hal::NativeDevice native = hal::native_device(d);
            return std::tuple<int, int>{native.type, native.ordinal};
          }, "(DLPack device type, vendor ordinal): (1, 0) for the host, (2, N) for cuda:N.")
      .def("__eq__", [](const hal::Device& a, const hal::Device& b) { return a == b; })
      .def("__hash__", [](const hal::Device& d) { return std::hash<std::string>{}(d.id()); })
      .def("__repr__", [](const hal::Device& d) { return "<hal.Device " + d.id() + ">"; });

  nb::class_<hal::Setting>(m, "Setting", "One setting in effect: its key, value (as TOML writes it) and source.")
      .def_ro("key", &hal::Setting::key)
      .def_ro("value", &hal::Setting::value)
      .def_prop_ro("source", &hal::Setting::source_text,
                   "'built-in default', the config file's 'path:line', or the variable: 'HAL_ATTN_STRICT=1'.")
      .def_prop_ro("origin", &hal::Setting::origin, "Who set it, as messages cite it.")
      .def_ro("environment_variable", &hal::Setting::environment_variable)
      .def("__repr__", [](const hal::Setting& s) { return "<hal.Setting " + s.key + " = " + s.value + " (" + s.source_text() + ")>"; });

  nb::class_<hal::Runtime>(m, "Runtime",
                           "Finds and loads the backend plugins and owns their devices. hal.runtime() is the "
                           "process-wide default; hal.Runtime() makes another one.")
      .def("__init__", [](hal::Runtime* self) {
            nb::gil_scoped_release release;
            new (self) hal::Runtime(hal::Runtime::create());
          }, "Loads the backends (never fails for a missing one: see .backends). Raises hal.Error for a bad config "
             "file or bad HAL_* variables.")
      .def_prop_ro("backends", &hal::Runtime::backends, "A BackendReport per known backend: name, state, reason, paths_tried.")
      .def_prop_ro("devices", &hal::Runtime::devices, "Every device of every loaded backend.")
      .def("device", &hal::Runtime::device, "id"_a,
           "The device with this id ('host:0'), UUID or PCI bus id; raises hal.InvalidArgumentError listing the ids.")
      .def("find_device", [](const hal::Runtime& r, const std::string& id) { return r.find_device(id); }, "id"_a,
           "As device(), but None when there is no such device.")
      .def("find_dlpack_device", [](const hal::Runtime& r, int type, int ordinal) {
            return hal::find_device(r, {static_cast<hal::dlpack::DLDeviceType>(type), ordinal});
          }, "device_type"_a, "device_id"_a,
          "The device a DLPack (device_type, device_id) pair names: (1, 0) is the host, (2, N) cuda:N. Raises "
          "hal.NotPresentError when hal has no such device.")
      .def_prop_ro("search_directories", &hal::Runtime::search_directories, "Plugin directories, in search order.")
      .def_prop_ro("settings", [](const hal::Runtime& r) { return r.settings().entries(); },
                   "Every setting in effect (a Setting each), resolved when the runtime was made.")
      .def("setting", [](const hal::Runtime& r, const std::string& key) { return r.settings().at(key); }, "key"_a,
           "The Setting of one key ('attention.strict'); raises hal.InvalidArgumentError listing the keys.")
      .def("__repr__", [](const hal::Runtime& r) {
        std::string ids;
        for (const auto& d : r.devices()) ids += (ids.empty() ? "" : ", ") + d.id();
        return "<hal.Runtime devices=[" + ids + "]>";
      });

  m.def("known_backend_names", &hal::known_backend_names, "The backends hal knows how to find.");

  // -------------------------------------------------------------- streams, events, buffers
  nb::class_<hal::Stream>(m, "Stream", "An in-order queue of work on one device (Device.create_stream()).")
      .def_prop_ro("device", &hal::Stream::device)
      .def(
          "synchronize",
          [](const hal::Stream& s) {
            {
              nb::gil_scoped_release release;
              s.synchronize();
            }
            hal::python::release_finished_work();
          },
          "Blocks until all work is done; raises the first error of failed work.")
      .def_prop_ro("is_idle", &hal::Stream::is_idle, "True when all enqueued work is done.")
      .def("record", &hal::Stream::record, "event"_a, "Records the event at this point of the stream.")
      .def("wait", &hal::Stream::wait, "event"_a, "Later work on this stream waits for the event's latest record.")
      .def_prop_ro(
          "native_handle", [](const hal::Stream& s) { return reinterpret_cast<std::uintptr_t>(s.native_handle()); },
          "The vendor's stream (CUstream, hipStream_t) as an int; raises hal.UnsupportedError on the host "
          "backend, whose streams are hal's own threads.")
      .def("__repr__", [](const hal::Stream& s) { return "<hal.Stream on " + s.device().id() + ">"; });

  nb::class_<hal::Event>(m, "Event", "A point in a stream (Device.create_event(), Stream.record()).")
      .def_prop_ro("device", &hal::Event::device)
      .def_prop_ro("is_complete", &hal::Event::is_complete)
      .def("synchronize", [](const hal::Event& e) { nb::gil_scoped_release release; e.synchronize(); })
      .def_prop_ro("native_handle", [](const hal::Event& e) { return reinterpret_cast<std::uintptr_t>(e.native_handle()); },
                   "The vendor's event as an int; raises hal.UnsupportedError on the host backend.")
      .def_static("elapsed_milliseconds", &hal::Event::elapsed_milliseconds, "start"_a, "end"_a,
                  "Time between two completed records on the same device, in milliseconds.")
      .def("__repr__", [](const hal::Event& e) { return "<hal.Event on " + e.device().id() + ">"; });

  // -------------------------------------------------------------- tensors and DLPack
  nb::class_<hal::Tensor>(m, "Tensor",
                          "A typed, strided view of hal memory (hal::Tensor): what DLPack exchanges. Make one with "
                          "hal.from_dlpack(obj) (no copy) or hal.empty(); give it to numpy/torch with their from_dlpack.")
      .def_prop_ro("shape", [](const hal::Tensor& t) { return nb::tuple(nb::cast(t.shape)); })
      .def_prop_ro("strides", [](const hal::Tensor& t) { return nb::tuple(nb::cast(t.effective_strides())); },
                   "Strides in elements (not bytes), one per axis.")
      .def_prop_ro("dtype", [](const hal::Tensor& t) { return std::string(hal::to_string(t.dtype)); }, "'f32', 'bf16', ...")
      .def_prop_ro("itemsize", [](const hal::Tensor& t) { return hal::size_in_bytes(t.dtype); })
      .def_prop_ro("ndim", [](const hal::Tensor& t) { return t.shape.size(); })
      .def_prop_ro("size", &hal::Tensor::element_count, "The number of elements.")
      .def_prop_ro("device", [](const hal::Tensor& t) { return t.buffer.device(); })
      .def_ro("byte_offset", &hal::Tensor::byte_offset, "Of element 0 from the start of the buffer.")
      .def_ro("read_only", &hal::Tensor::read_only, "The producer asked that it not be written.")
      .def_prop_ro("data_ptr", [](const hal::Tensor& t) {
            return reinterpret_cast<std::uintptr_t>(t.buffer.device_address()) + t.byte_offset;
          }, "The address of element 0 on its device, as an int.")
      .def("__dlpack__", &tensor_dlpack, "stream"_a = nb::none(), "max_version"_a = nb::none(),
           "dl_device"_a = nb::none(), "copy"_a = nb::none(),
           "The array-API DLPack export: a 'dltensor_versioned' capsule when max_version >= (1, 0), else a "
           "'dltensor' one. No copy unless copy=True. hal.Tensor carries no pending work, so stream is accepted and "
           "needs no synchronization.")
      .def("__dlpack_device__", &dlpack_device_of, "(DLPack device type, device id): (1, 0) for host memory.")
      .def("__repr__", &tensor_repr);

  m.def("_from_capsule", &tensor_from_capsule, "runtime"_a, "capsule"_a,
        "Consumes a DLPack capsule (marking it used) into a hal.Tensor without a copy.");
  m.def("_empty", [](const hal::Device& device, std::vector<std::int64_t> shape, const std::string& dtype) {
        hal::Tensor tensor;
        tensor.dtype = dtype_from(dtype);
        tensor.shape = std::move(shape);
        for (const auto extent : tensor.shape)
          if (extent < 0) throw hal::Error(hal::StatusCode::invalid_argument, "empty: extents must be >= 0");
        const std::uint64_t bytes = tensor.element_count() * hal::size_in_bytes(tensor.dtype);
        tensor.buffer = device.allocate(bytes == 0 ? 1 : bytes);
        return tensor;
      }, "device"_a, "shape"_a, "dtype"_a);
  m.def("_copy_tensor", &copy_of, "tensor"_a);
  m.def("_zero", [](const hal::Tensor& tensor) {
        if (const std::uint64_t span = tensor.span_bytes(); span != 0) tensor.buffer.fill(tensor.byte_offset, span, 0);
      }, "tensor"_a, "Sets every byte the tensor spans to 0.");
  m.def("dtype_name", [](const std::string& text) { return std::string(hal::to_string(dtype_from(text))); }, "text"_a,
        "hal's name for a dtype spelling: 'float32' -> 'f32'; raises hal.InvalidArgumentError for an unknown one.");

  // -------------------------------------------------------------- attention
  nb::class_<hal::AttentionParams>(m, "AttentionParams",
                                   "One attention problem (hal::AttentionParams). hal.attention_forward fills it "
                                   "from tensors; set fields directly for explain_attention on shapes alone.")
      .def(nb::init<>())
      .def_rw("batch", &hal::AttentionParams::batch)
      .def_rw("heads_q", &hal::AttentionParams::heads_q)
      .def_rw("heads_kv", &hal::AttentionParams::heads_kv, "0: same as heads_q; fewer: GQA/MQA.")
      .def_rw("seq_q", &hal::AttentionParams::seq_q)
      .def_rw("seq_kv", &hal::AttentionParams::seq_kv, "0: same as seq_q.")
      .def_rw("head_dim_qk", &hal::AttentionParams::head_dim_qk)
      .def_rw("head_dim_v", &hal::AttentionParams::head_dim_v, "0: same as head_dim_qk.")
      .def_prop_rw("dtype", [](const hal::AttentionParams& p) { return std::string(hal::to_string(p.dtype)); },
                   [](hal::AttentionParams& p, const std::string& text) { p.dtype = dtype_from(text); }, "'f32', 'f16' or 'bf16'.")
      .def_prop_rw("layout", [](const hal::AttentionParams& p) { return layout_name(p.layout); },
                   [](hal::AttentionParams& p, const std::string& text) { p.layout = layout_from(text); },
                   "'bshd' or 'bhsd': the memory order when no explicit strides are given.")
      .def_rw("causal", &hal::AttentionParams::causal)
      .def_prop_rw("alignment", [](const hal::AttentionParams& p) { return alignment_name(p.alignment); },
                   [](hal::AttentionParams& p, const std::string& text) { p.alignment = alignment_from(text); },
                   "'top_left' (query i sees keys <= i, torch's is_causal) or 'bottom_right'.")
      .def_rw("window_left", &hal::AttentionParams::window_left, "-1: unbounded.")
      .def_rw("window_right", &hal::AttentionParams::window_right, "-1: unbounded.")
      .def_rw("softmax_scale", &hal::AttentionParams::softmax_scale, "None: 1/sqrt(head_dim_qk).")
      .def_rw("return_lse", &hal::AttentionParams::return_lse, "LSE: f32, contiguous [batch, heads_q, seq_q].")
      .def_rw("key_ranges", &hal::AttentionParams::key_ranges,
              "The call passes per-query key ranges: int32 (batch, seq_q, 2), [begin, end) of the keys each query "
              "sees (padding, packed sequences).")
#define HAL_STRIDES(name)                                                                                     \
  .def_prop_rw(#name, [](const hal::AttentionParams& p) { return strides_out(p.name); },                      \
               [](hal::AttentionParams& p, std::optional<Strides4> s) { p.name = strides_in(s); }, nb::arg().none(), \
               "(batch, head, seq, dim) element strides, or None for the layout's.")
      HAL_STRIDES(q_strides) HAL_STRIDES(k_strides) HAL_STRIDES(v_strides) HAL_STRIDES(o_strides)
      HAL_STRIDES(grad_o_strides) HAL_STRIDES(grad_q_strides) HAL_STRIDES(grad_k_strides) HAL_STRIDES(grad_v_strides)
#undef HAL_STRIDES
      .def("resolved", &hal::AttentionParams::resolved,
           "The same problem with every default made explicit; raises hal.InvalidArgumentError naming a bad value.")
      .def("describe", &hal::AttentionParams::describe)
      .def("__repr__", [](const hal::AttentionParams& p) { return "<hal.AttentionParams " + p.describe() + ">"; });

  nb::class_<hal::AttentionCandidate>(m, "AttentionCandidate", "One implementation and why it was or was not eligible.")
      .def_prop_ro("implementation", [](const hal::AttentionCandidate& c) { return std::string(hal::to_string(c.implementation)); })
      .def_ro("in_order", &hal::AttentionCandidate::in_order)
      .def_ro("declared", &hal::AttentionCandidate::declared)
      .def_ro("eligible", &hal::AttentionCandidate::eligible)
      .def_ro("reasons", &hal::AttentionCandidate::reasons, "Why not, most decisive first.")
      .def_ro("workspace_bytes", &hal::AttentionCandidate::workspace_bytes)
      .def("__repr__", [](const hal::AttentionCandidate& c) {
        return "<hal.AttentionCandidate " + std::string(hal::to_string(c.implementation)) + (c.eligible ? " eligible>" : " not eligible>");
      });

  nb::class_<hal::AttentionDecision>(m, "AttentionDecision",
                                     "Which attention implementation runs and why each other does not; str() is the table.")
      .def_prop_ro("chosen", [](const hal::AttentionDecision& d) { return std::string(hal::to_string(d.chosen)); })
      .def_ro("found", &hal::AttentionDecision::found, "False: nothing is eligible.")
      .def_prop_ro("order", [](const hal::AttentionDecision& d) { return implementation_names(d.order); })
      .def_ro("order_source", &hal::AttentionDecision::order_source)
      .def_ro("candidates", &hal::AttentionDecision::candidates)
      .def_ro("fell_back", &hal::AttentionDecision::fell_back)
      .def("__str__", &hal::AttentionDecision::to_string)
      .def("__repr__", [](const hal::AttentionDecision& d) {
        return d.found ? "<hal.AttentionDecision " + std::string(hal::to_string(d.chosen)) + ">"
                       : std::string("<hal.AttentionDecision nothing eligible>");
      });

  m.def("_explain_attention", [](const hal::Device& device, const hal::AttentionParams& params, bool backward,
                                 std::optional<std::vector<std::string>> implementations) {
        return hal::explain_attention(device, params, backward, options_from(implementations));
      }, "device"_a, "params"_a, "backward"_a = false, "implementations"_a = nb::none());

  m.def("_attention_forward", &run_forward, "stream"_a, "params"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a = nb::none(),
        "implementations"_a = nb::none(), "key_ranges"_a = nb::none(), "synchronize"_a = true);
  m.def("_attention_backward", &run_backward, "stream"_a, "params"_a, "q"_a, "k"_a, "v"_a, "o"_a, "grad_o"_a, "lse"_a,
        "grad_q"_a, "grad_k"_a, "grad_v"_a, "implementations"_a = nb::none(), "key_ranges"_a = nb::none(),
        "synchronize"_a = true);

  // hal.torch's per-call path: the operator's tensors as addresses on the
  // stream's device (hal::TensorRef::borrowed), their shapes and strides in
  // params, which hal.torch makes once per geometry: nothing is imported or
  // looked up per call. They return nothing: the decision is
  // hal.torch.explain's, and making a Python object of it per call costs.
  // key_ranges: the address of the int32 key ranges, 0 for none.
  m.def("_attention_forward_at", [](const hal::Stream& stream, const hal::AttentionParams& params,
                                    std::uintptr_t q, std::uintptr_t k, std::uintptr_t v, std::uintptr_t o,
                                    std::uintptr_t lse, std::uintptr_t key_ranges, bool synchronize) {
        nb::gil_scoped_release release;
        hal::AttentionOptions options;
        options.key_ranges = borrowed(key_ranges);
        hal::attention_forward(stream, params, borrowed(q), borrowed(k), borrowed(v), borrowed(o), borrowed(lse),
                               options);
        if (synchronize) stream.synchronize();
      }, "stream"_a, "params"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "key_ranges"_a, "synchronize"_a);
  m.def("_attention_backward_at", [](const hal::Stream& stream, const hal::AttentionParams& params,
                                     std::uintptr_t q, std::uintptr_t k, std::uintptr_t v, std::uintptr_t o,
                                     std::uintptr_t grad_o, std::uintptr_t lse, std::uintptr_t grad_q,
                                     std::uintptr_t grad_k, std::uintptr_t grad_v, std::uintptr_t key_ranges,
                                     bool synchronize) {
        nb::gil_scoped_release release;
        hal::AttentionOptions options;
        options.key_ranges = borrowed(key_ranges);
        hal::attention_backward(stream, params, borrowed(q), borrowed(k), borrowed(v), borrowed(o), borrowed(grad_o),
                                borrowed(lse), borrowed(grad_q), borrowed(grad_k), borrowed(grad_v), options);
        if (synchronize) stream.synchronize();
      }, "stream"_a, "params"_a, "q"_a, "k"_a, "v"_a, "o"_a, "grad_o"_a, "lse"_a, "grad_q"_a, "grad_k"_a, "grad_v"_a,
        "key_ranges"_a, "synchronize"_a);

  // The C++ side of the Python path's overhead (python -m hal.bench): the
  // same call and synchronization as _attention_forward, `calls` times in a
  // loop, without Python in between; returns the mean seconds per call.
  m.def("_time_attention_forward", [](const hal::Stream& stream, const hal::AttentionParams& params,
                                      const hal::Tensor& q, const hal::Tensor& k, const hal::Tensor& v,
                                      const hal::Tensor& o, std::optional<hal::Tensor> lse, int calls) {
        if (calls < 1) throw hal::Error(hal::StatusCode::invalid_argument, "calls is " + std::to_string(calls) + "; it must be >= 1");
        nb::gil_scoped_release release;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
          hal::attention_forward(stream, params, tensor_ref(q), tensor_ref(k), tensor_ref(v), tensor_ref(o), tensor_ref(lse));
          stream.synchronize();
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
      }, "stream"_a, "params"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a = nb::none(), "calls"_a);

  // -------------------------------------------------------------- collectives
  hal::python::bind_collectives(m);
  hal::python::bind_masks(m);
}
