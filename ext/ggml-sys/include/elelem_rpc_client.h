/* What native/rpc_client.cpp offers the engine (see there). */
#pragma once
#include <stddef.h>
#include "ggml-backend.h"
#ifdef __cplusplus
extern "C" {
#endif
void elelem_rpc_client_mode(int timeout_ms);
unsigned elelem_rpc_failures(const char * endpoint, char * why, size_t n);
ggml_backend_reg_t elelem_rpc_add_server(const char * endpoint, char * err, size_t n);
ggml_backend_t elelem_rpc_backend_init(ggml_backend_dev_t dev, char * err, size_t n);
void elelem_rpc_serve(const char * endpoint, const char * cache_dir, size_t n_threads, ggml_backend_dev_t * devices,
                      size_t n_devices);
#ifdef __cplusplus
}
#endif
