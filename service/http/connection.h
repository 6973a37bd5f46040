#pragma once
// One client connection as its worker sees it, whatever it speaks:
// HTTP/1.1 (http1_connection.h) or HTTP/2 carrying gRPC
// (http2_connection.h). It is owned by one worker and only ever touched on
// that worker's thread; the worker's sweep meets its deadline, parks it
// when idle, drains it at shutdown and, when the drain's time is over,
// closes it. Private to http/.

#include <chrono>
#include <memory>
#include <string>

namespace numaserve::http {

class Worker;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Clock = std::chrono::steady_clock;

  // Joins the worker's list; `counted` against max_connections (a refused one is not).
  Connection(Worker& owner, bool counted);
  virtual ~Connection();  // leaves it
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  virtual void start() = 0;
  // Over the connection limit: told so at once (a 503, a GOAWAY), then closed.
  virtual void refuse(const std::string& message) = 0;
  virtual void expire() = 0;  // its deadline passed
  virtual void park() = 0;    // idle for a sweep tick: hold no buffer while waiting
  // The server stops: what is under way is answered; an idle connection is
  // closed once it has been idle for shutdown_idle_seconds.
  virtual void drain() = 0;
  virtual void close() = 0;
  virtual bool idle() const = 0;
  // A request is being read, handled or sent: closing now would break it.
  virtual bool mid_request() const = 0;
  virtual const char* state() const = 0;  // how the drain's cut names what it cut

  Clock::time_point since() const { return since_; }
  Clock::time_point deadline() const { return deadline_; }

  Worker& worker;
  Connection* prev = nullptr;  // the worker's list of its connections
  Connection* next = nullptr;

 protected:
  void uncount();  // once closed: no longer counted against max_connections
  // The socket goes on as another Connection (counted in its place).
  void hand_over_count() { counted_ = false; }

  Clock::time_point since_ = Clock::now();
  Clock::time_point deadline_ = Clock::time_point::max();

 private:
  bool counted_;
};

// When a connection accepted now retires by age: the age drawn within ±10%
// of max_connection_age (as gRPC jitters MAX_CONNECTION_AGE), so that the
// connections a fleet's clients opened together do not all end together.
// max(): never (age_seconds 0).
Connection::Clock::time_point retire_at(double age_seconds);

}  // namespace numaserve::http
