#include "server/connection_pool.h"
#ifndef MOESTREAM_NO_HTTPLIB

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "util/error.h"

namespace ms::server {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// What a connection refused at once reads: a complete response, so a client
// sees why (when its request arrived before the close).
const std::string& busy_response() {
  static const std::string r = [] {
    const std::string body =
        "{\"error\":{\"message\":\"the server has too many open connections (--max-connections); retry "
        "later\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           "Connection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  return r;
}

}  // namespace

struct ConnectionPool::Conn {
  int fd = -1;  // our dup() of the connection's socket; -1: not found
  unsigned long inode = 0;
  bool overflow = false;
  std::chrono::milliseconds timeout{0};
  std::atomic<int64_t> deadline_ns{0};  // steady clock; 0: none
  std::atomic<bool> close_after{false};
};

namespace {
thread_local ConnectionPool::Conn* t_conn = nullptr;
}

ConnectionPool::ConnectionPool(ConnectionLimits lim, int port) : lim_(lim), port_(port) {
  try {
    for (size_t i = 0; i < lim_.overflow_threads; ++i) overflow_threads_.emplace_back([this] { overflow_worker(); });
    watchdog_ = std::thread([this] { watchdog(); });
  } catch (const std::system_error& e) {
    shutdown();
    throw Error(std::string("cannot start the HTTP server's threads: ") + e.what());
  }
}

ConnectionPool::~ConnectionPool() { shutdown(); }

namespace {

// The local port of a TCP socket, or -1.
int local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

bool is_listening(int fd) {
  int listening = 0;
  socklen_t len = sizeof listening;
  return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening;
}

}  // namespace

bool ConnectionPool::widen_backlog(int port, int backlog) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (is_listening(static_cast<int>(fd)) && local_port(static_cast<int>(fd)) == port)
      found = ::listen(static_cast<int>(fd), backlog) == 0 || found;
  }
  closedir(d);
  return found;
}

// The connected socket on our port that no connection holds yet: the one
// accept() just returned (only the accepting thread creates such sockets,
// and it is here).
std::shared_ptr<ConnectionPool::Conn> ConnectionPool::adopt_new_socket() {
  auto c = std::make_shared<Conn>();
  DIR* d = opendir("/proc/self/fd");
  if (!d) return c;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    {
      std::lock_guard lk(m_);
      if (known_inodes_.count(st.st_ino)) continue;
    }
    if (is_listening(static_cast<int>(fd)) || local_port(static_cast<int>(fd)) != port_) continue;
    c->fd = fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
    c->inode = st.st_ino;
    if (c->fd >= 0) {
      std::lock_guard lk(m_);
      known_inodes_.insert(c->inode);
    }
    break;
  }
  closedir(d);
  return c;
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  Task t{std::move(fn), adopt_new_socket()};
  std::unique_lock lk(m_);
  if (t.conn->fd >= 0) live_.push_back(t.conn);
  if (!stopping_ && open_ < lim_.max_connections) {
    // One thread per open connection; threads stay for later connections.
    if (main_threads_.size() <= open_) {
      try {
        main_threads_.emplace_back([this] { main_worker(); });
      } catch (const std::system_error& e) {
        // No thread to be had (a process or user limit): past the cap below.
        if (!spawn_failed_reported_) {
          spawn_failed_reported_ = true;
          std::fprintf(stderr, "moestream: cannot start another HTTP thread (%s) with %zu connections open; "
                       "more are refused until some close\n", e.what(), static_cast<size_t>(open_));
        }
      }
    }
    if (main_threads_.size() > open_) {
      ++open_;
      t.conn->timeout = lim_.request_timeout;
      main_q_.push_back(std::move(t));
      cv_main_.notify_one();
      return;
    }
  }
  // A connection we could not find cannot be refused without reading it:
  // the overflow threads take it whatever their queue holds.
  if (!stopping_ && !overflow_threads_.empty() &&
      (overflow_q_.size() < lim_.overflow_queue || t.conn->fd < 0)) {
    t.conn->overflow = true;
    t.conn->timeout = lim_.overflow_timeout;
    overflow_q_.push_back(std::move(t));
    cv_overflow_.notify_one();
    return;
  }
  lk.unlock();
  refuse(t);
}

// On the accepting thread: a 503 without reading the request, and the
// socket shut so that httplib's own processing of it ends at once.
void ConnectionPool::refuse(Task& t) {
  ++refused_;
  const int fd = t.conn->fd;
  if (fd >= 0) {
    const std::string& r = busy_response();
    (void)!::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    char buf[4096];  // what already arrived: unread input would turn the close into a reset
    while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
    ::shutdown(fd, SHUT_RD);
  }
  try {
    t.fn();
  } catch (...) {
  }
  finish(t.conn);
}

void ConnectionPool::run(Task t, bool overflow) {
  Conn& c = *t.conn;
  c.deadline_ns = now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(c.timeout).count();
  t_conn = &c;
  try {
    t.fn();  // httplib: every request of the connection, then it closes its socket
  } catch (...) {
  }
  t_conn = nullptr;
  finish(t.conn);
  if (!overflow) {
    std::lock_guard lk(m_);
    --open_;
  }
}

void ConnectionPool::finish(const std::shared_ptr<Conn>& c) {
  std::lock_guard lk(m_);
  for (size_t i = 0; i < live_.size(); ++i)
    if (live_[i] == c) {
      live_[i] = live_.back();
      live_.pop_back();
      break;
    }
  if (c->fd >= 0) {
    ::close(c->fd);  // httplib has closed its own: the socket is gone now
    known_inodes_.erase(c->inode);
    c->fd = -1;
  }
}

void ConnectionPool::main_worker() {
  for (;;) {
    std::unique_lock lk(m_);
    cv_main_.wait(lk, [&] { return stopping_ || !main_q_.empty(); });
    if (main_q_.empty()) return;  // stopping, nothing left
    Task t = std::move(main_q_.front());
    main_q_.pop_front();
    lk.unlock();
    run(std::move(t), false);
  }
}

void ConnectionPool::overflow_worker() {
  for (;;) {
    std::unique_lock lk(m_);
    cv_overflow_.wait(lk, [&] { return stopping_ || !overflow_q_.empty(); });
    if (overflow_q_.empty()) return;
    Task t = std::move(overflow_q_.front());
    overflow_q_.pop_front();
    lk.unlock();
    run(std::move(t), true);
  }
}

// Cuts off connections whose request did not arrive whole in time: the
// shutdown ends httplib's blocked read, and it closes the connection.
void ConnectionPool::watchdog() {
  std::unique_lock lk(m_);
  while (!stopping_) {
    cv_watch_.wait_for(lk, std::chrono::milliseconds(100));
    const int64_t now = now_ns();
    for (const auto& c : live_) {
      const int64_t dl = c->deadline_ns;
      if (dl != 0 && now > dl && c->fd >= 0) {
        ::shutdown(c->fd, SHUT_RDWR);
        c->deadline_ns = 0;
      }
    }
  }
}

void ConnectionPool::shutdown() {
  {
    std::lock_guard lk(m_);
    stopping_ = true;
    // Reads end now (idle keep-alive connections, slow requests); responses
    // being written (a stream ending with "shutting down") still go out.
    for (const auto& c : live_)
      if (c->fd >= 0) ::shutdown(c->fd, SHUT_RD);
  }
  cv_main_.notify_all();
  cv_overflow_.notify_all();
  cv_watch_.notify_all();
  for (auto* threads : {&main_threads_, &overflow_threads_})
    for (auto& th : *threads)
      if (th.joinable()) th.join();
  if (watchdog_.joinable()) watchdog_.join();
}

bool ConnectionPool::over_capacity() { return t_conn && t_conn->overflow; }

void ConnectionPool::request_read() {
  if (t_conn) t_conn->deadline_ns = 0;
}

void ConnectionPool::response_sent() {
  Conn* c = t_conn;
  if (!c || c->fd < 0) return;
  if (c->overflow || c->close_after) {
    ::shutdown(c->fd, SHUT_RDWR);  // what was written still goes out, before the FIN
    return;
  }
  c->deadline_ns = now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(c->timeout).count();
}

void ConnectionPool::close_after_response() {
  if (t_conn) t_conn->close_after = true;
}

bool ConnectionPool::client_gone() {
  if (!t_conn || t_conn->fd < 0) return false;
  char b;
  const ssize_t n = ::recv(t_conn->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  // 0: the client's FIN. Pipelined bytes (n > 0) or nothing yet: still there.
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace ms::server
#endif
