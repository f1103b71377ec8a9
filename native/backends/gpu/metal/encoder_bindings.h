// What an open Metal compute encoder has bound: the pipeline and, per argument index, a buffer and its
// offset or a parameter struct (setBytes). Metal keeps all of it from one dispatch to the next within
// an encoder, so a dispatch needs to send only what differs; this says what that is. A decode step
// reuses the same activation and scratch buffers layer after layer, so part of its bindings are in
// place already.
#pragma once

#include <cstddef>
#include <cstring>

#include "../runtime.h"
#include "objc.h"

namespace moelens::gpu {

class EncoderBindings {
 public:
  enum class BufferCall {
    None,    // the buffer is bound there at that offset already
    Offset,  // the buffer is bound there at another offset: setBufferOffset:atIndex: is enough
    Full,    // another buffer, or nothing, is bound there
  };

  // A fresh encoder has nothing bound.
  void reset() { *this = EncoderBindings(); }

  // Whether `pipeline` needs setComputePipelineState:; records it as bound.
  bool pipeline(id pipeline) {
    const bool send = pipeline != pipeline_;
    pipeline_ = pipeline;
    return send;
  }

  // The call that binding `buffer` at `offset` to `index` needs; records it as bound.
  BufferCall buffer(int index, id buffer, size_t offset) {
    Slot& s = slots_[index];
    const BufferCall call = s.buffer != buffer ? BufferCall::Full : s.offset != offset ? BufferCall::Offset : BufferCall::None;
    s = Slot{buffer, offset};
    if (bytes_index_ == index) bytes_index_ = -1;
    return call;
  }

  // Whether these `size` bytes at `index` need setBytes:length:atIndex:; records them as bound.
  bool bytes(int index, const void* data, size_t size) {
    const bool same = bytes_index_ == index && bytes_size_ == size && std::memcmp(bytes_, data, size) == 0;
    slots_[index] = Slot{};  // setBytes replaces a buffer bound at that index
    bytes_index_ = index;
    bytes_size_ = size;
    std::memcpy(bytes_, data, size);
    return !same;
  }

  // `buffer` is being released: an object allocated later at the same address must not pass for it.
  void forget(id buffer) {
    for (Slot& s : slots_)
      if (s.buffer == buffer) s = Slot{};
  }

 private:
  struct Slot {
    id buffer = nullptr;
    size_t offset = 0;
  };
  id pipeline_ = nullptr;
  Slot slots_[kMaxBindings];
  int bytes_index_ = -1;  // where the last setBytes went, until something else is bound there
  size_t bytes_size_ = 0;
  alignas(16) unsigned char bytes_[kMaxParamsBytes];
};

}  // namespace moelens::gpu
