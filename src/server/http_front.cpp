#include "server/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "util/error.h"

namespace ms::server::http {

namespace {

using Clock = std::chrono::steady_clock;

// Past this much unsent output (pipelined answers the client does not read),
// the loop stops reading the connection until it drains.
constexpr size_t kMaxPendingOutput = 64 << 10;
constexpr size_t kReadChunk = 64 << 10;
constexpr int kListenBacklog = 1024;
// After the last answer on a connection that is closing, its input is read and
// dropped this long (a lingering close): closing with unread input sends a
// reset, which can destroy the answer (a 413, say) before the client reads it.
constexpr auto kLinger = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 4u << 20;

std::string head_of(const Request& req, const Response& res, bool streamed, bool close) {
  std::string h = "HTTP/1.1 " + std::to_string(res.status) + " " + status_reason(res.status) + "\r\n";
  for (const auto& [n, v] : res.headers) h += n + ": " + v + "\r\n";
  if (streamed) {
    if (req.minor_version >= 1) h += "Transfer-Encoding: chunked\r\n";
  } else if (res.status != 204 && res.status >= 200) {
    h += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  if (close) h += "Connection: close\r\n";
  return h + "\r\n";
}

// The whole response when it is not streamed.
std::string serialize(const Request& req, const Response& res, bool close) {
  std::string out = head_of(req, res, false, close);
  if (req.method != "HEAD" && res.status != 204) out += res.body;
  return out;
}

std::string peer_address(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  return buf;
}

// Writes all of `data` to a non-blocking socket within `timeout` (the whole
// write, not each bit of progress: a client reading a byte now and then cannot
// hold a worker). False: the client is gone or does not read.
bool write_all(int fd, const char* data, size_t size, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace

struct HttpFront::Conn {
  int fd = -1;
  std::string remote;
  RequestParser parser;
  std::string out;  // answers not yet written (the loop's)
  size_t held = 0;  // parser bytes counted in Impl::buffered
  Clock::time_point deadline;
  bool overflow = false;
  bool busy = false;       // a worker owns the socket
  bool closing = false;    // close once `out` is written
  bool peer_eof = false;   // the client sent FIN (it may still read: a half-close)
  bool registered = false;
  uint32_t events = 0;
  bool probed = false;     // a worker sent an interim 100 to tell a half-close from a close
  bool write_failed = false;  // a worker could not write its answer: the client is gone
  bool lingering = false;  // answered and half-closed: dropping input until the client closes
  size_t lingered = 0;     // bytes dropped
  explicit Conn(const ParserLimits& l) : parser(l) {}
};

struct HttpFront::Impl {
  HttpFront& self;
  FrontOptions opt;
  FrontHandlers h;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::unordered_map<int, std::unique_ptr<Conn>> conns;
  size_t buffered = 0;  // request bytes held, all connections
  bool accept_paused = false;
  Clock::time_point accept_resume;

  // Workers.
  struct Task {
    Conn* conn;
    Request req;
  };
  std::mutex m;
  std::condition_variable cv;
  std::deque<Task> tasks;
  std::vector<std::thread> threads;
  size_t idle = 0;
  bool workers_stop = false;
  std::vector<std::pair<Conn*, bool>> returned;  // (connection, keep it open)
  size_t busy_count = 0;                       // loop's count of connections out with workers

  Impl(HttpFront& s, FrontOptions o, FrontHandlers hh) : self(s), opt(std::move(o)), h(std::move(hh)) {}

  ~Impl() {
    {
      std::lock_guard lk(m);
      workers_stop = true;
    }
    cv.notify_all();
    for (auto& t : threads)
      if (t.joinable()) t.join();
    for (auto& [fd, c] : conns) ::close(fd);
    for (int fd : {listen_fd, epoll_fd, wake_fd})
      if (fd >= 0) ::close(fd);
  }

  void wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof one);
  }

  // ---- the loop's side

  void set_events(Conn& c) {
    uint32_t ev = 0;
    if (c.lingering) {
      ev = EPOLLIN | EPOLLRDHUP;
    } else if (!c.busy) {
      if (!c.closing && !c.peer_eof && c.out.size() < kMaxPendingOutput) ev |= EPOLLIN | EPOLLRDHUP;
      if (!c.out.empty()) ev |= EPOLLOUT;
    }
    if (c.registered && ev == c.events) return;
    epoll_event e{};
    e.events = ev;
    e.data.fd = c.fd;
    if (ev == 0) {
      // Nothing wanted (a worker owns it): not watched, so that a hang-up is
      // not reported over and over while the worker runs.
      if (c.registered) ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
      c.registered = false;
    } else {
      ::epoll_ctl(epoll_fd, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &e);
      c.registered = true;
    }
    c.events = ev;
  }

  void close_conn(Conn& c) {
    if (c.registered) ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    buffered -= c.held;
    const int fd = c.fd;
    ::close(fd);
    conns.erase(fd);
    self.open_ = conns.size();
  }

  void update_held(Conn& c) {
    const size_t now = c.parser.buffered();
    buffered = buffered - c.held + now;
    c.held = now;
  }

  // Writes what the loop holds for `c` without blocking; closes it when done closing.
  // Returns false when the connection was closed.
  bool flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c);
      return false;
    }
    if (c.out.empty() && (c.closing || (c.peer_eof && !c.parser.in_request()))) {
      if (c.closing && !c.peer_eof && !c.lingering) {
        ::shutdown(c.fd, SHUT_WR);  // the answer is out; the FIN follows it
        c.lingering = true;
        c.deadline = Clock::now() + kLinger;
        set_events(c);
        return linger(c);
      }
      close_conn(c);
      return false;
    }
    set_events(c);
    return true;
  }

  // Drops what a lingering connection's client still sends; closes it at its
  // EOF, an error, or kLingerBytes. Returns false when it closed.
  bool linger(Conn& c) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0 && (c.lingered += static_cast<size_t>(n)) < kLingerBytes) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      close_conn(c);
      return false;
    }
  }

  // An answer the loop makes itself, queued on `c`.
  void answer(Conn& c, Request& req, Response& res, bool close) {
    close = close || res.close || !req.keep_alive || c.overflow || stopping;
    c.out += serialize(req, res, close);
    if (close) c.closing = true;
    if (h.log) h.log(req, res);
  }

  void refuse(Conn& c, const Request& req, int status, const std::string& message) {
    Response res;
    h.refuse(req, status, message, res);
    Request r;  // what the answer and the log need: not the body
    r.method = req.method;
    r.target = req.target;
    r.path = req.path;
    r.minor_version = req.minor_version;
    r.headers = req.headers;
    r.remote_addr = c.remote;
    r.keep_alive = false;
    answer(c, r, res, true);
  }

  void reset_deadline(Conn& c) {
    c.deadline = Clock::now() + (c.overflow ? opt.overflow_timeout : opt.request_timeout);
  }

  // Frames and answers what `c` holds, in order, until a worker takes a
  // request, the connection is closing, or too much output is pending.
  void process(Conn& c) {
    while (!c.busy && !c.closing && c.out.size() < kMaxPendingOutput) {
      const RequestParser::State st = c.parser.parse();
      update_held(c);
      if (st == RequestParser::State::NeedMore) {
        if (c.peer_eof && c.parser.in_request())
          refuse(c, c.parser.pending(), 400, "the client closed its side of the connection mid-request");
        break;
      }
      if (st == RequestParser::State::HeadersDone) {
        if (c.parser.expects_continue() && c.parser.pending().minor_version >= 1)
          c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        continue;
      }
      if (st == RequestParser::State::Error) {
        refuse(c, c.parser.pending(), c.parser.error().status, c.parser.error().message);
        break;
      }
      Request req = c.parser.take();
      update_held(c);
      req.remote_addr = c.remote;
      req.over_capacity = c.overflow;
      reset_deadline(c);
      if (stopping) {
        refuse(c, req, 503, "the server is shutting down");
        break;
      }
      if (!c.overflow && h.needs_worker(req)) {
        if (dispatch(c, std::move(req))) break;
        continue;  // refused: answered inline
      }
      Response res;
      try {
        h.handle(req, res);
      } catch (const std::exception& e) {
        res = Response{};
        h.refuse(req, 500, e.what(), res);
      }
      answer(c, req, res, false);
    }
    if (!c.busy) flush(c);
  }

  // Hands a request to a worker; with none free, answers 503 (false).
  bool dispatch(Conn& c, Request req) {
    {
      std::unique_lock lk(m);
      bool have = idle > tasks.size();
      if (!have && threads.size() < opt.workers) {
        try {
          threads.emplace_back([this] { worker(); });
          ++idle;
          have = true;
        } catch (const std::system_error&) {
        }
      }
      if (have) {
        c.busy = true;
        ++busy_count;
        set_events(c);
        req.client_gone = [this, cp = &c, minor = req.minor_version] { return client_gone(*cp, minor); };
        tasks.push_back(Task{&c, std::move(req)});
        cv.notify_one();
        return true;
      }
    }
    ++self.refused_;
    Response res;
    h.refuse(req, 503,
             "the server is answering " + std::to_string(opt.workers) +
                 " requests at once (--max-requests); retry later",
             res);
    res.set_header("Retry-After", "1");
    answer(c, req, res, false);
    return false;
  }

  void on_returned(Conn* c, bool keep) {
    c->busy = false;
    --busy_count;
    if (c->write_failed) {
      close_conn(*c);
      return;
    }
    if (!keep || stopping) {
      c->closing = true;
      flush(*c);  // lingers, then closes
      return;
    }
    reset_deadline(*c);
    process(*c);
  }

  void read_from(Conn& c) {
    char buf[kReadChunk];
    const size_t cap = opt.parser.max_header_bytes + opt.parser.max_body + kReadChunk;
    while (c.parser.buffered() < cap) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.parser.feed(buf, static_cast<size_t>(n));
        update_held(c);
        if (buffered > opt.max_buffered) {
          refuse(c, c.parser.pending(), 503,
                 "the server holds " + std::to_string(opt.max_buffered >> 20) +
                     " MiB of requests still arriving; retry later");
          return;
        }
        if (static_cast<size_t>(n) < sizeof buf) break;
        continue;
      }
      if (n == 0) {
        c.peer_eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      c.closing = true;  // a reset: nothing can be answered
      c.out.clear();
      break;
    }
  }

  void on_event(int fd, uint32_t ev) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    if (c.busy) return;
    if (c.lingering) {
      linger(c);
      return;
    }
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      read_from(c);
      if (c.closing && c.out.empty() && !(ev & EPOLLOUT)) {
        flush(c);
        return;
      }
      process(c);  // flushes, and closes what is done
      return;
    }
    if (ev & EPOLLOUT) {
      if (flush(c)) process(c);
    }
  }

  void accept_all() {
    for (int i = 0; i < 256; ++i) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // No descriptor to be had: stop accepting for a moment (the backlog waits).
          accept_paused = true;
          accept_resume = Clock::now() + std::chrono::milliseconds(100);
          epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        }
        return;
      }
      if (stopping || conns.size() >= opt.max_connections + opt.overflow_connections) {
        refuse_at_once(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>(opt.parser);
      c->fd = fd;
      c->remote = peer_address(addr);
      c->overflow = conns.size() >= opt.max_connections;
      reset_deadline(*c);
      Conn& ref = *c;
      conns.emplace(fd, std::move(c));
      self.open_ = conns.size();
      set_events(ref);
    }
  }

  // Past every limit: a 503 without reading the request, and the close.
  void refuse_at_once(int fd) {
    ++self.refused_;
    static const std::string r = [] {
      const std::string body =
          "{\"error\":{\"message\":\"the server has too many open connections (--max-connections); retry "
          "later\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
             "Connection: close\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body;
    }();
    (void)!::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    char buf[4096];
    while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
    ::close(fd);
  }

  // Connections whose request did not arrive in time: 408 (mid-request) or a quiet close (idle).
  void expire() {
    const auto now = Clock::now();
    std::vector<Conn*> late;
    for (auto& [fd, c] : conns)
      if (!c->busy && now > c->deadline) late.push_back(c.get());
    for (Conn* c : late) {
      if (c->parser.in_request() && !c->closing) {
        refuse(*c, c->parser.pending(), 408,
               "the request did not arrive whole within " +
                   std::to_string((c->overflow ? opt.overflow_timeout : opt.request_timeout).count() / 1000) +
                   " s (--read-timeout)");
        c->deadline = now + std::chrono::seconds(1);  // to write it; then closed regardless
        if (!flush(*c)) continue;
        if (c->closing && c->out.empty()) continue;
      }
      close_conn(*c);
    }
  }

  void loop() {
    epoll_event evs[256];
    auto last_sweep = Clock::now();
    bool listening = true;
    for (;;) {
      if (stopping && listening) {
        // No new connections; the ones not being answered by a worker close
        // (idle, or mid-request: a client retries a request it got no answer to).
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        ::close(listen_fd);
        listen_fd = -1;
        listening = false;
        std::vector<Conn*> idle_conns;
        for (auto& [fd, c] : conns)
          if (!c->busy) idle_conns.push_back(c.get());
        for (Conn* c : idle_conns) close_conn(*c);
      }
      if (!listening && busy_count == 0) break;
      const int n = ::epoll_wait(epoll_fd, evs, 256, 100);
      for (int i = 0; i < n; ++i) {
        const int fd = evs[i].data.fd;
        if (fd == listen_fd) {
          if (!stopping) accept_all();
        } else if (fd == wake_fd) {
          uint64_t v;
          (void)!::read(wake_fd, &v, sizeof v);
          std::vector<std::pair<Conn*, bool>> back;
          {
            std::lock_guard lk(m);
            back.swap(returned);
          }
          for (auto& [c, keep] : back) on_returned(c, keep);
        } else {
          on_event(fd, evs[i].events);
        }
      }
      const auto now = Clock::now();
      if (accept_paused && now > accept_resume && listening) {
        accept_paused = false;
        epoll_event e{};
        e.events = EPOLLIN;
        e.data.fd = listen_fd;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &e);
      }
      if (now - last_sweep > std::chrono::milliseconds(100)) {
        last_sweep = now;
        expire();
      }
    }
  }

  // ---- the workers' side

  // Whether the client of a connection a worker owns has gone. A FIN alone
  // may be a half-close (the client still reads): on HTTP/1.1 an interim
  // "100 Continue" is sent once, which a closed socket answers with a reset.
  bool client_gone(Conn& c, int minor) {
    pollfd p{c.fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
    if (!(p.revents & POLLRDHUP)) return false;
    char b;
    const ssize_t n = ::recv(c.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n != 0) return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (minor >= 1 && !c.probed) {
      c.probed = true;
      static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
      if (::send(c.fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return true;
    }
    return false;
  }

  class Sink : public DataSink {
   public:
    Sink(int fd, bool chunked, std::chrono::milliseconds timeout) : fd_(fd), chunked_(chunked), timeout_(timeout) {}
    bool write(const char* data, size_t size) override {
      if (failed_ || done_) return false;
      if (size == 0) return true;
      std::string frame;
      if (chunked_) {
        char len[24];
        std::snprintf(len, sizeof len, "%zx\r\n", size);
        frame = len;
        frame.append(data, size);
        frame += "\r\n";
      } else {
        frame.assign(data, size);
      }
      failed_ = !write_all(fd_, frame.data(), frame.size(), timeout_);
      return !failed_;
    }
    void done() override {
      if (done_ || failed_) return;
      done_ = true;
      if (chunked_) failed_ = !write_all(fd_, "0\r\n\r\n", 5, timeout_);
    }
    bool is_done() const { return done_; }
    bool failed() const { return failed_; }

   private:
    int fd_;
    bool chunked_;
    std::chrono::milliseconds timeout_;
    bool done_ = false, failed_ = false;
  };

  // Answers one request on the calling worker; returns whether the connection may carry another.
  bool answer_on_worker(Conn& c, Request& req) {
    // What the loop still held for this connection (answers to earlier
    // pipelined requests, a 100 Continue) goes first.
    bool ok = c.out.empty() || write_all(c.fd, c.out.data(), c.out.size(), opt.write_timeout);
    c.out.clear();
    if (!ok) {  // the client is gone: nothing to generate for
      c.write_failed = true;
      return false;
    }
    Response res;
    try {
      h.handle(req, res);
    } catch (const std::exception& e) {
      res = Response{};
      h.refuse(req, 500, e.what(), res);
    }
    const bool http10 = req.minor_version == 0;
    bool close = res.close || !req.keep_alive || stopping;
    if (res.provider) {
      close = close || http10;  // close-delimited on HTTP/1.0
      const std::string head = head_of(req, res, true, close);
      ok = ok && write_all(c.fd, head.data(), head.size(), opt.write_timeout);
      Sink sink(c.fd, !http10, opt.write_timeout);
      size_t calls = 0;
      while (ok && !sink.is_done()) {
        bool more = false;
        try {
          more = res.provider(calls++, sink);
        } catch (...) {
          more = false;
        }
        if (!more || sink.failed()) ok = false;
      }
      ok = ok && !sink.failed();
      if (res.finished) res.finished(ok);
    } else if (ok) {
      const std::string out = serialize(req, res, close);
      ok = write_all(c.fd, out.data(), out.size(), opt.write_timeout);
    }
    if (h.log) h.log(req, res);
    c.write_failed = !ok;
    return ok && !close;  // closing: the loop half-closes, lingers, then closes
  }

  void worker() {
    for (;;) {
      std::unique_lock lk(m);
      cv.wait(lk, [&] { return workers_stop || !tasks.empty(); });
      if (tasks.empty()) return;
      Task t = std::move(tasks.front());
      tasks.pop_front();
      --idle;
      lk.unlock();
      const bool keep = answer_on_worker(*t.conn, t.req);
      t.req = Request{};  // its buffers go before the connection is handed back
      lk.lock();
      ++idle;
      returned.emplace_back(t.conn, keep);
      lk.unlock();
      wake();
    }
  }
};

HttpFront::HttpFront(FrontOptions opt, FrontHandlers h) : impl_(std::make_unique<Impl>(*this, std::move(opt), std::move(h))) {}

HttpFront::~HttpFront() = default;

int HttpFront::bind() {
  Impl& m = *impl_;
  const std::string where = m.opt.host + ":" + std::to_string(m.opt.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(m.opt.port);
  if (const int rc = ::getaddrinfo(m.opt.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw Error("cannot listen on " + where + ": " + gai_strerror(rc) + " (check --host)");
  int err = 0;
  for (addrinfo* a = res; a && m.listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only: with SO_REUSEPORT a second server would bind the
    // same port and the kernel would split the connections between them.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
      err = errno;
      ::close(fd);
      continue;
    }
    m.listen_fd = fd;
  }
  ::freeaddrinfo(res);
  if (m.listen_fd < 0) {
    if (err == EADDRINUSE)
      throw Error("cannot listen on " + where +
                  ": address already in use (another server on this port? try another --port, or --port 0 "
                  "for a free one)");
    throw Error("cannot listen on " + where + (err ? std::string(": ") + std::strerror(err) : std::string()) +
                " (check --host and --port)");
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  m.opt.port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port)
                                          : ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);

  // Every connection is a descriptor: the soft limit must cover them.
  const rlim_t need = m.opt.max_connections + m.opt.overflow_connections + 256;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
    rl.rlim_cur = std::min(need, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need) {
      const size_t fit = rl.rlim_cur > 256 + m.opt.overflow_connections ? rl.rlim_cur - 256 - m.opt.overflow_connections : 1;
      std::fprintf(stderr, "moestream: the descriptor limit (%llu) allows %zu connections, not %zu\n",
                   static_cast<unsigned long long>(rl.rlim_cur), fit, m.opt.max_connections);
      m.opt.max_connections = fit;
    }
  }

  m.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  m.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll_fd < 0 || m.wake_fd < 0) throw Error(std::string("cannot start the HTTP server: ") + std::strerror(errno));
  for (int fd : {m.listen_fd, m.wake_fd}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, fd, &e);
  }
  return m.opt.port;
}

void HttpFront::run() {
  Impl& m = *impl_;
  if (m.listen_fd < 0 && !m.stopping) bind();
  if (m.stopping) return;
  m.loop();
  {
    std::lock_guard lk(m.m);
    m.workers_stop = true;
  }
  m.cv.notify_all();
  for (auto& t : m.threads)
    if (t.joinable()) t.join();
  m.threads.clear();
  std::vector<Conn*> left;
  for (auto& [fd, c] : m.conns) left.push_back(c.get());
  for (Conn* c : left) m.close_conn(*c);
}

void HttpFront::stop() {
  Impl& m = *impl_;
  m.stopping = true;
  if (m.wake_fd >= 0) m.wake();
}

}  // namespace ms::server::http
