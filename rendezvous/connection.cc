#include "rendezvous/connection.h"

#include <boost/asio/write.hpp>

namespace dtl::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Connection::Connection(tcp::socket socket, NodeId id, tcp::endpoint remote, std::string source,
                       std::shared_ptr<const Events> events)
    : socket_(std::move(socket)),
      id_(id),
      remote_(std::move(remote)),
      source_(std::move(source)),
      events_(std::move(events)) {
  if (events_->claims) first_.emplace();
}

void Connection::start() { read(); }

void Connection::read() {
  socket_.async_read_some(asio::buffer(buf_),
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                            if (self->handing_over_ && !self->closed_) {  // the read cancelled for it
                              self->first_->insert(self->first_->end(), self->buf_.data(), self->buf_.data() + n);
                              return self->events_->claimed(self);
                            }
                            if (self->closed_ || self->closing_) return;
                            if (ec)
                              return self->events_->failed(self, true, ec == asio::error::eof ? kHungUp : ec.message());
                            self->last_heard = Clock::now();
                            self->delivered(self->buf_.data(), n);
                          });
}

void Connection::delivered(const uint8_t* data, size_t size) {
  auto self = shared_from_this();
  if (first_) {
    first_->insert(first_->end(), data, data + size);
    auto theirs = events_->claims(first_->data(), first_->size());
    if (!theirs) return read();
    if (*theirs) return events_->claimed(self);
    data = first_->data();
    size = first_->size();
  }
  std::vector<Message> messages;
  auto error = decoder_.feed(data, size, messages);
  first_.reset();  // `data` pointed into it: decoded by now
  for (const auto& m : messages) {
    if (closing_ || closed_) return;
    ++frames;
    events_->message(self, m);
  }
  if (closed_ || closing_) return;
  if (error) return events_->failed(self, false, "bad frame: " + error->what);
  read();
}

void Connection::send(Bytes frame) {
  if (closed_) return;
  out_.push_back(std::move(frame));
  last_sent = Clock::now();
  if (!writing_) write();
}

void Connection::write() {
  if (out_.empty()) {
    writing_ = false;
    if (closing_) close();
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                      if (self->closed_) return;
                      self->out_.pop_front();
                      if (ec) {
                        self->out_.clear();
                        self->writing_ = false;
                        if (self->closing_) return self->close();
                        return self->events_->failed(self, false, "write failed: " + ec.message());
                      }
                      self->write();
                    });
}

void Connection::close_after_sending() {
  closing_ = true;
  if (!writing_) close();
}

void Connection::close() {
  if (closed_) return;
  closed_ = closing_ = true;
  // A write in flight still reads the front buffer: the queue stays until its handler has run.
  if (!writing_) out_.clear();
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (events_->closed) events_->closed(shared_from_this());
}

void Connection::hand_over_once_read_ends() {
  if (!first_ || closed_ || closing_) return;
  handing_over_ = true;
  boost::system::error_code ignored;
  socket_.cancel(ignored);  // the pending read ends, with whatever it had, and `claimed` follows
}

std::pair<tcp::socket, Bytes> Connection::hand_over() {
  closed_ = closing_ = true;
  return {std::move(socket_), first_ ? std::move(*first_) : Bytes{}};
}

}  // namespace dtl::rendezvous
