// DLPack on the host backend: import and export without a copy, the deleter
// called exactly once, and every bad input refused with nothing leaked.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core_test_support.hpp"

using hal::StatusCode;
using hal_test::check_error;
using hal_test::HostDeviceFixture;
namespace dl = hal::dlpack;

namespace {

// A producer's tensor over its own memory, counting deleter calls.
template <typename Managed>
struct Producer {
  std::vector<float> data;
  std::vector<std::int64_t> shape, strides;
  Managed managed{};
  int deletes = 0;

  Producer(std::vector<std::int64_t> tensor_shape, std::vector<std::int64_t> tensor_strides = {})
      : shape(std::move(tensor_shape)), strides(std::move(tensor_strides)) {
    std::size_t count = 1;
    for (auto extent : shape) count *= static_cast<std::size_t>(extent);
    data.resize(count + 16);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
    dl::DLTensor& tensor = managed.dl_tensor;
    tensor.data = data.data();
    tensor.device = {dl::kDLCPU, 0};
    tensor.ndim = static_cast<std::int32_t>(shape.size());
    tensor.dtype = {dl::kDLFloat, 32, 1};
    tensor.shape = shape.data();
    tensor.strides = strides.empty() ? nullptr : strides.data();
    tensor.byte_offset = 0;
    managed.manager_ctx = this;
    managed.deleter = [](Managed* self) { ++static_cast<Producer*>(self->manager_ctx)->deletes; };
    if constexpr (requires { managed.version; }) managed.version = {1, 0};
  }
};

using VersionedProducer = Producer<dl::DLManagedTensorVersioned>;

}  // namespace

TEST_SUITE("dlpack") {

TEST_CASE_FIXTURE(HostDeviceFixture, "a DLPack tensor becomes a hal tensor without a copy; the deleter runs once") {
  VersionedProducer producer({2, 3, 4});
  producer.managed.dl_tensor.byte_offset = 8;  // starts at element 2
  {
    hal::Tensor tensor = hal::from_dlpack(runtime, &producer.managed);
    CHECK(tensor.dtype == hal::DType::f32);
    CHECK(tensor.shape == std::vector<std::int64_t>{2, 3, 4});
    CHECK(tensor.strides.empty());
    CHECK(tensor.effective_strides() == std::vector<std::int64_t>{12, 4, 1});
    CHECK(tensor.byte_offset == 8);
    CHECK(tensor.buffer.host_address() == producer.data.data());
    CHECK(tensor.buffer.size() == 8 + 24 * 4);
    float value = 0;
    tensor.buffer.read(tensor.byte_offset, &value, sizeof(value));
    CHECK(value == 2.0f);
    const float written = -7.0f;
    tensor.buffer.write(tensor.byte_offset, &written, sizeof(written));
    CHECK(producer.data[2] == -7.0f);  // the producer sees hal's writes
    hal::Buffer copy = tensor.buffer;
    tensor = {};
    CHECK(producer.deletes == 0);
  }
  CHECK(producer.deletes == 1);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "the pre-1.0 DLManagedTensor is taken too") {
  Producer<dl::DLManagedTensor> producer({5}, {2});
  {
    const hal::Tensor tensor = hal::from_dlpack(runtime, &producer.managed);
    CHECK(tensor.strides == std::vector<std::int64_t>{2});
    CHECK(tensor.span_bytes() == (4 * 2 + 1) * 4);
    CHECK(tensor.buffer.size() == tensor.span_bytes());
    CHECK(producer.deletes == 0);
  }
  CHECK(producer.deletes == 1);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a round trip through DLPack keeps the address, and the export keeps the buffer alive") {
  hal::Buffer buffer = device.allocate(4 * 6 * 8);
  hal::Tensor tensor;
  tensor.buffer = buffer;
  tensor.byte_offset = 16;
  tensor.dtype = hal::DType::bf16;
  tensor.shape = {6, 4};
  tensor.strides = {8, 1};  // rows padded to 8 elements
  tensor.read_only = true;
  dl::DLManagedTensorVersioned* exported = hal::to_dlpack(tensor);
  CHECK(exported->version.major == 1);
  CHECK(exported->dl_tensor.data == buffer.host_address());
  CHECK(exported->dl_tensor.byte_offset == 16);
  CHECK(exported->dl_tensor.device.device_type == dl::kDLCPU);
  CHECK(exported->dl_tensor.dtype.code == dl::kDLBfloat);
  CHECK(exported->dl_tensor.dtype.bits == 16);
  CHECK(exported->dl_tensor.ndim == 2);
  CHECK(exported->dl_tensor.shape[0] == 6);
  CHECK(exported->dl_tensor.strides[0] == 8);
  CHECK((exported->flags & dl::flag_read_only) != 0);
  const void* address = buffer.host_address();
  buffer = {};
  tensor = {};  // only the export holds the memory now

  const hal::Tensor back = hal::from_dlpack(runtime, exported);
  CHECK(back.buffer.host_address() == address);
  CHECK(back.byte_offset == 16);
  CHECK(back.read_only);
  CHECK(back.dtype == hal::DType::bf16);
  CHECK(back.strides == std::vector<std::int64_t>{8, 1});
  // The legacy form, too.
  dl::DLManagedTensor* legacy = hal::to_dlpack_unversioned(back);
  CHECK(legacy->dl_tensor.data == address);
  legacy->deleter(legacy);
}

TEST_CASE("DLPack dtypes map both ways") {
  for (const hal::DType dtype : hal::all_dtypes) {
    const dl::DLDataType named = hal::to_dlpack(dtype);
    CHECK(named.lanes == 1);
    CHECK(named.bits == 8 * hal::size_in_bytes(dtype));
    CHECK(hal::from_dlpack(named) == dtype);
  }
  CHECK(hal::to_dlpack(hal::DType::f16).code == dl::kDLFloat);
  CHECK(hal::to_dlpack(hal::DType::u8).code == dl::kDLUInt);
  check_error([] { hal::from_dlpack(dl::DLDataType{dl::kDLComplex, 64, 1}); }, StatusCode::invalid_argument,
              {"DLPack dtype code 5 with 64 bits has no hal::DType"});
  check_error([] { hal::from_dlpack(dl::DLDataType{dl::kDLBool, 8, 1}); }, StatusCode::invalid_argument,
              {"code 6 with 8 bits"});
  check_error([] { hal::from_dlpack(dl::DLDataType{dl::kDLFloat, 32, 4}); }, StatusCode::invalid_argument,
              {"4 lanes is not supported"});
}

TEST_CASE_FIXTURE(HostDeviceFixture, "every bad DLPack input is refused by name, and the deleter still runs once") {
  auto refused = [&](VersionedProducer& producer, StatusCode code, std::initializer_list<std::string_view> fragments) {
    check_error([&] { hal::from_dlpack(runtime, &producer.managed); }, code, fragments);
    CHECK(producer.deletes == 1);
  };
  {
    VersionedProducer producer({4});
    producer.managed.dl_tensor.data = nullptr;
    refused(producer, StatusCode::invalid_argument, {"data pointer is NULL for a tensor of 4 elements"});
  }
  {
    VersionedProducer producer({4});
    producer.managed.dl_tensor.dtype = {dl::kDLComplex, 64, 1};
    refused(producer, StatusCode::invalid_argument, {"code 5 with 64 bits"});
  }
  {
    VersionedProducer producer({4});
    producer.managed.dl_tensor.dtype = {dl::kDLFloat, 32, 2};
    refused(producer, StatusCode::invalid_argument, {"2 lanes"});
  }
  {
    VersionedProducer producer({4});
    producer.managed.version = {2, 0};
    producer.managed.dl_tensor.data = nullptr;  // past version and deleter nothing may be read
    refused(producer, StatusCode::invalid_argument, {"DLPack major version 2 is not one hal understands", "released"});
  }
  {
    VersionedProducer producer({4});
    producer.managed.dl_tensor.device = {dl::kDLCUDA, 3};
    refused(producer, StatusCode::not_present, {"DLPack device {kDLCUDA, 3} is not a device hal has loaded",
                                                "host:0 {kDLCPU, 0}"});
  }
  {
    VersionedProducer producer({4});
    producer.managed.dl_tensor.device = {dl::kDLVulkan, 0};
    refused(producer, StatusCode::unsupported, {"device type 7", "of a type hal has no backend for"});
  }
  {
    VersionedProducer producer({4, 2}, {-2, 1});
    refused(producer, StatusCode::invalid_argument, {"strides[0] is -2", "non-negative strides"});
  }
  {
    VersionedProducer producer({4, -1});
    refused(producer, StatusCode::invalid_argument, {"shape[1] is -1"});
  }
  {
    VersionedProducer producer({4});
    producer.managed.dl_tensor.ndim = -1;
    refused(producer, StatusCode::invalid_argument, {"ndim is -1"});
  }
  {
    VersionedProducer producer({4});
    producer.managed.dl_tensor.shape = nullptr;
    refused(producer, StatusCode::invalid_argument, {"shape is NULL"});
  }
  {
    VersionedProducer producer({1, 1}, {std::int64_t{1} << 62, 1});
    producer.shape = {8, 1};
    producer.managed.dl_tensor.shape = producer.shape.data();
    refused(producer, StatusCode::invalid_argument, {"reach past 64-bit byte offsets"});
  }
  check_error([&] { hal::from_dlpack(runtime, static_cast<dl::DLManagedTensorVersioned*>(nullptr)); },
              StatusCode::invalid_argument, {"the managed tensor is NULL"});
}

TEST_CASE_FIXTURE(HostDeviceFixture, "an empty tensor (batch 0) needs no memory") {
  VersionedProducer producer({0, 4});
  producer.managed.dl_tensor.data = nullptr;
  {
    const hal::Tensor tensor = hal::from_dlpack(runtime, &producer.managed);
    CHECK(tensor.element_count() == 0);
    CHECK(tensor.span_bytes() == 0);
    CHECK(tensor.buffer.size() == 0);
  }
  CHECK(producer.deletes == 1);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "an export that reaches past its buffer is refused") {
  hal::Tensor tensor;
  tensor.buffer = device.allocate(64);
  tensor.dtype = hal::DType::f32;
  tensor.shape = {17};
  check_error([&] { hal::to_dlpack(tensor); }, StatusCode::invalid_argument, {"reaches 68 bytes into a buffer of 64"});
  tensor.shape = {16};
  tensor.strides = {1, 1};
  check_error([&] { hal::to_dlpack(tensor); }, StatusCode::invalid_argument, {"1 axes but 2 strides"});
}

TEST_CASE_FIXTURE(HostDeviceFixture, "find_device maps DLPack devices to hal devices") {
  CHECK(hal::find_device(runtime, {dl::kDLCPU, 0}) == device);
  check_error([&] { hal::find_device(runtime, {dl::kDLROCM, 0}); }, StatusCode::not_present, {"{kDLROCM, 0}"});
}

}  // TEST_SUITE("dlpack")
