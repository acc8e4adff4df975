// baton::Stream: reads a Generate call's messages one at a time.
#include "convert.h"
#include "stream_impl.h"

namespace baton {

Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;

Stream::~Stream() {
  if (impl_ && !impl_->done) {
    // Finish() on an unfinished call would wait for the server: cancel first, then drain.
    impl_->context.TryCancel();
    v1::GenerateResponse ignored;
    while (impl_->reader->Read(&ignored)) {
    }
    (void)impl_->reader->Finish();
  }
}

std::optional<Delta> Stream::next() {
  if (impl_->done) return std::nullopt;
  v1::GenerateResponse message;
  if (impl_->reader->Read(&message)) return client_internal::from_proto(message);
  impl_->done = true;
  impl_->status = client_internal::from_grpc(impl_->reader->Finish());
  return std::nullopt;
}

const Status& Stream::status() const { return impl_->status; }

void Stream::cancel() { impl_->context.TryCancel(); }

}  // namespace baton
