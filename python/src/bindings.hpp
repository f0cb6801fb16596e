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

// hal::Store, Store::from_environment and hal::Communicator on hal.Tensor
// (python/src/collectives.cpp); hal/_collectives.py is the Python face.
void bind_collectives(nanobind::module_& m);

// hal.torch's one-pass reading of a boolean attention mask (python/src/masks.cpp).
void bind_masks(nanobind::module_& m);

}  // namespace hal::python
