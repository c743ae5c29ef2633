// elelem's side of ggml's RPC client (see include/elelem_rpc.h): timeouts on every
// network wait, a failed connection recorded instead of the process aborted, and the two
// calls that can connect on the calling thread guarded so that their failure is an error
// the caller gets. Compiled without elelem_rpc.h, so the socket calls here are the real ones.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "ggml-impl.h"
#include "ggml-rpc.h"
#include "elelem_rpc_client.h"

namespace {

struct rpc_failure : std::exception {
    std::string message;
    explicit rpc_failure(std::string m) : message(std::move(m)) {}
    const char * what() const noexcept override { return message.c_str(); }
};

struct connection {
    std::string endpoint;  // "ip:port", as the connect call saw it
    // The socket's inode. ggml closes its sockets without telling us, and the next socket
    // may get the same descriptor: a worker's accepted connection in this very process, or
    // a new client. Only the socket that connected is this connection.
    ino_t socket = 0;
    bool failed = false;
};

std::mutex mutex;
std::unordered_map<int, connection> clients;            // by file descriptor
std::unordered_map<std::string, unsigned> failure_count;  // by endpoint
std::unordered_map<std::string, std::string> last_failure;
std::atomic<int> timeout_ms{60000};
std::atomic<bool> client_mode{false};
thread_local int guard_depth = 0;
thread_local int last_fd = -1;
thread_local std::string last_error;

std::string endpoint_of(const struct sockaddr * addr) {
    if (addr->sa_family != AF_INET) return "?";
    auto * in = reinterpret_cast<const struct sockaddr_in *>(addr);
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
}

// Marks `fd`'s connection failed (once) and counts the failure against its endpoint.
void fail(int fd, const std::string & why) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = clients.find(fd);
    if (it == clients.end() || it->second.failed) return;
    it->second.failed = true;
    failure_count[it->second.endpoint]++;
    last_failure[it->second.endpoint] = why;
}

ino_t inode_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

bool is_failed_client(int fd, bool * is_client) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = clients.find(fd);
    if (it != clients.end() && it->second.socket != inode_of(fd)) {
        clients.erase(it);  // a closed connection's descriptor, now another socket's
        it = clients.end();
    }
    *is_client = it != clients.end();
    return *is_client && it->second.failed;
}

void copy_message(const std::string & text, char * err, size_t n) {
    if (err && n > 0) snprintf(err, n, "%s", text.c_str());
}

// What failed on this thread: ggml's message, the reason its connection failed, and what
// it logged last.
std::string guard_failure(const char * what) {
    std::string text = what;
    {
        std::lock_guard<std::mutex> lock(mutex);
        auto it = clients.find(last_fd);
        if (it != clients.end() && it->second.failed && !last_failure[it->second.endpoint].empty()) {
            text += " (" + last_failure[it->second.endpoint] + ")";
        }
    }
    if (!last_error.empty()) text += " (" + last_error + ")";
    return text;
}

// Runs `call`, which may connect on this thread, with elelem_rpc_abort throwing instead of
// returning; a failure, or a NULL answer (`when_null` says why), is NULL and a message in `err`.
template <typename Call>
auto guarded(Call call, const char * when_null, char * err, size_t n) -> decltype(call()) {
    guard_depth++;
    last_error.clear();
    last_fd = -1;
    try {
        auto result = call();
        guard_depth--;
        if (!result) copy_message(when_null, err, n);
        return result;
    } catch (const std::exception & e) {
        guard_depth--;
        copy_message(guard_failure(e.what()), err, n);
        return nullptr;
    }
}

}  // namespace

extern "C" {

void elelem_rpc_log_error(const char * fmt, ...) {
    char message[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof(message), fmt, args);
    va_end(args);
    last_error = message;
    while (!last_error.empty() && last_error.back() == '\n') last_error.pop_back();
    ggml_log_internal(GGML_LOG_LEVEL_ERROR, "%s", message);
}

void elelem_rpc_abort(const char * file, int line, const char * fmt, ...) {
    char message[2048];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof(message), fmt, args);
    va_end(args);
    size_t len = strlen(message);
    while (len > 0 && message[len - 1] == '\n') message[--len] = '\0';
    if (guard_depth > 0) {
        throw rpc_failure(message);
    }
    if (client_mode.load()) {
        // A dispatcher thread: its connection is dead to elelem from now on; the caller
        // sees the failure when it next checks (elelem_rpc_failures).
        fail(last_fd, message);
        return;
    }
    fprintf(stderr, "%s:%d: %s\n", file, line, message);
    abort();
}

int elelem_rpc_connect(int fd, const struct sockaddr * addr, socklen_t len) {
    const int timeout = timeout_ms.load();
    int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(fd, addr, len);
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        rc = poll(&pfd, 1, timeout);
        if (rc == 0) {
            errno = ETIMEDOUT;
            rc = -1;
        } else if (rc > 0) {
            int error = 0;
            socklen_t elen = sizeof(error);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &elen);
            errno = error;
            rc = error == 0 ? 0 : -1;
        }
    }
    int saved = errno;
    fcntl(fd, F_SETFL, flags);
    if (rc < 0) {
        last_error = std::string("connecting: ") + strerror(saved);
        errno = saved;
        return rc;
    }
    struct timeval tv = {timeout / 1000, (timeout % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    std::lock_guard<std::mutex> lock(mutex);
    clients[fd] = connection{endpoint_of(addr), inode_of(fd), false};
    return 0;
}

ssize_t elelem_rpc_send(int fd, const void * buf, size_t n, int flags) {
    last_fd = fd;
    bool is_client = false;
    if (is_failed_client(fd, &is_client)) {
        errno = EPIPE;
        return -1;
    }
    ssize_t sent = ::send(fd, buf, n, flags | (is_client ? MSG_NOSIGNAL : 0));
    if (sent < 0 && is_client) {
        fail(fd, errno == EAGAIN || errno == EWOULDBLOCK
                     ? "the worker took no data for " + std::to_string(timeout_ms.load() / 1000) + " s"
                     : std::string("sending to the worker failed: ") + strerror(errno));
    }
    return sent;
}

ssize_t elelem_rpc_recv(int fd, void * buf, size_t n, int flags) {
    last_fd = fd;
    bool is_client = false;
    if (is_failed_client(fd, &is_client)) {
        errno = EPIPE;
        return -1;
    }
    ssize_t got = ::recv(fd, buf, n, flags);
    if (is_client && got <= 0) {
        if (got == 0) {
            fail(fd, "the worker closed the connection");
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            fail(fd, "the worker did not answer within " + std::to_string(timeout_ms.load() / 1000) + " s");
        } else {
            fail(fd, std::string("receiving from the worker failed: ") + strerror(errno));
        }
    }
    return got;
}

// From now on a failed RPC connection is recorded, not fatal, and every network wait of a
// client lasts at most `timeout`. A send to a closed worker must not raise SIGPIPE either
// (client sends carry MSG_NOSIGNAL; SIGPIPE is ignored too, if nobody handles it).
void elelem_rpc_client_mode(int timeout) {
    timeout_ms.store(timeout > 0 ? timeout : 1);
    if (!client_mode.exchange(true)) {
        struct sigaction current;
        if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
            signal(SIGPIPE, SIG_IGN);
        }
    }
}

// How many connections to `endpoint` ("ip:port") have failed so far, and the last reason.
unsigned elelem_rpc_failures(const char * endpoint, char * why, size_t n) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = failure_count.find(endpoint);
    if (it == failure_count.end()) return 0;
    copy_message(last_failure[endpoint], why, n);
    return it->second;
}

// ggml_backend_rpc_add_server, with a failure to connect or to agree on the protocol
// returned as NULL and a message instead of aborting.
ggml_backend_reg_t elelem_rpc_add_server(const char * endpoint, char * err, size_t n) {
    return guarded([&] { return ggml_backend_rpc_add_server(endpoint); }, "the worker has no devices", err, n);
}

// ggml_backend_dev_init on an RPC device (which connects when no connection to its
// worker is held), guarded as elelem_rpc_add_server.
ggml_backend_t elelem_rpc_backend_init(ggml_backend_dev_t dev, char * err, size_t n) {
    return guarded([&] { return ggml_backend_dev_init(dev, nullptr); }, "the worker's backend could not be made", err,
                   n);
}

// Serves `devices` at `endpoint` until the process ends (ggml_backend_rpc_start_server),
// after giving SIGINT and SIGTERM back their default action: the accept loop cannot be
// interrupted, so Ctrl-C ends the process, as it ends llama.cpp's rpc-server. Returns
// only when the server cannot start.
void elelem_rpc_serve(const char * endpoint, const char * cache_dir, size_t n_threads, ggml_backend_dev_t * devices,
                      size_t n_devices) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    ggml_backend_rpc_start_server(endpoint, cache_dir, n_threads, n_devices, devices);
}

}  // extern "C"
