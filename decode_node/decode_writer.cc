#include "decode_node/decode_writer.h"

namespace baton {

void DecodeWriter::push(node::v1::DecodeResponse message, bool last) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finishing_ || last_queued_) return;
  queue_.push_back(std::move(message));
  last_queued_ = last;
  if (writing_) return;
  writing_ = true;
  const node::v1::DecodeResponse* next = &queue_.front();  // deque: stays put while others are added
  lock.unlock();
  StartWrite(next);
}

void DecodeWriter::fail(const grpc::Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finishing_) return;
  if (writing_) {
    if (!deferred_failure_) deferred_failure_ = status;
    return;
  }
  finishing_ = true;
  lock.unlock();
  Finish(status);
}

void DecodeWriter::OnWriteDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  queue_.pop_front();
  std::optional<grpc::Status> finish;
  if (!ok) {
    finish = grpc::Status(grpc::StatusCode::CANCELLED, "the client stopped reading");
  } else if (deferred_failure_) {
    finish = *deferred_failure_;
  } else if (!queue_.empty()) {
    const node::v1::DecodeResponse* next = &queue_.front();
    lock.unlock();
    StartWrite(next);
    return;
  } else if (last_queued_) {
    finish = grpc::Status::OK;
  }
  writing_ = false;
  if (!finish) return;
  finishing_ = true;
  lock.unlock();
  Finish(*finish);
}

bool DecodeWriter::open() {
  std::lock_guard<std::mutex> lock(mu_);
  return !finishing_ && !last_queued_;
}

void DecodeWriter::OnCancel() {
  if (on_cancel_) on_cancel_();
  fail(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
}

void DecodeWriter::OnDone() {
  if (on_done_) on_done_();
  delete this;
}

}  // namespace baton
