// The parts of the hal._hal extension, each binding one area of the C++ API.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <hal/dtype.hpp>
#include <hal/interop.hpp>
#include <hal/runtime.hpp>

namespace hal::python {

// A tensor's shape as Python writes a tuple: "(2, 3)", "(4,)", "()".
std::string shape_text(const Tensor& tensor);

// (address, shape, strides in elements) of memory its owner keeps alive and
// in place until the call and its stream work are done.
using BorrowedArgument = std::tuple<std::uintptr_t, std::vector<std::int64_t>, std::vector<std::int64_t>>;

// Non-owning hal.Tensors over borrowed memory on a DLPack device, through
// hal::from_dlpack (which checks them as it checks any producer's); those
// from index f32_from on are f32 (the LSE), the others `dtype`.
std::vector<Tensor> borrowed_tensors(const Runtime& runtime, std::tuple<int, int> device, DType dtype,
                                     const std::vector<BorrowedArgument>& arguments, std::size_t f32_from);

// hal::Store, Store::from_environment and hal::Communicator on hal.Tensor
// (python/src/collectives.cpp); hal/_collectives.py is the Python face.
void bind_collectives(nanobind::module_& m);

}  // namespace hal::python
