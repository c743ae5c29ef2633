/* Forced into ggml-rpc's two sources (ggml-rpc.cpp, transport.cpp) only, by
 * ext/ggml-sys/build.rs. ggml's RPC client aborts the process on any network failure
 * (GGML_ABORT in RPC_STATUS_ASSERT, in its connect and handshake) and waits on its
 * sockets without a timeout. elelem is a library in someone else's process: a worker that
 * dies or answers garbage must be an error on the calling thread, and no wait may last
 * forever. So, in these two files only:
 * - GGML_ABORT becomes elelem_rpc_abort (native/rpc_client.cpp), which throws on a thread
 *   inside an elelem guard and otherwise marks the connection failed and returns;
 * - GGML_LOG_ERROR also keeps the thread's last message, for the error elelem raises
 *   (a version mismatch is only logged);
 * - connect, send and recv become elelem's, which give client sockets a connect timeout
 *   and send/receive timeouts and record which connection failed and why.
 * The sources themselves are compiled as the pinned package ships them. */
#pragma once
#ifdef __cplusplus
#undef _FORTIFY_SOURCE
#include "ggml.h"
#include "ggml-impl.h"
#include <sys/types.h>
#include <sys/socket.h>
#undef GGML_ABORT
#define GGML_ABORT(...) elelem_rpc_abort(__FILE__, __LINE__, __VA_ARGS__)
extern "C" void elelem_rpc_abort(const char * file, int line, const char * fmt, ...);
#undef GGML_LOG_ERROR
#define GGML_LOG_ERROR(...) elelem_rpc_log_error(__VA_ARGS__)
extern "C" void elelem_rpc_log_error(const char * fmt, ...);
extern "C" int elelem_rpc_connect(int fd, const struct sockaddr * addr, socklen_t len);
extern "C" ssize_t elelem_rpc_send(int fd, const void * buf, size_t n, int flags);
extern "C" ssize_t elelem_rpc_recv(int fd, void * buf, size_t n, int flags);
#define connect elelem_rpc_connect
#define send elelem_rpc_send
#define recv elelem_rpc_recv
#endif
