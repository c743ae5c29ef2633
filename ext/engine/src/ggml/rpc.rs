//! Workers reached over ggml's RPC protocol (`elelem rpc-server`, or llama.cpp's
//! `rpc-server`): each offers its devices, which hold layers of a model as a local GPU would.
//!
//! ggml's RPC client aborts the process when a worker fails. elelem's build compiles it
//! with `ext/ggml-sys/include/elelem_rpc.h`, under which a failure is recorded against its
//! connection instead (and every network wait times out): [`RpcWorker::check`] turns one
//! into [`Error::Backend`] on the calling thread, and the process, and its other models,
//! go on. The protocol has no authentication: workers belong on a trusted network.

use std::ffi::{c_char, CStr, CString};
use std::net::ToSocketAddrs;
use std::ptr::NonNull;
use std::time::Duration;

use ggml_sys as sys;

use super::device::Device;
use crate::{Error, Result};

/// How long any network wait of an RPC client lasts at most, unless the caller says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One worker: its endpoint, its devices, and how many of its connections had failed when
/// it was reached (later failures are this model's).
pub struct RpcWorker {
    /// As the caller wrote it (`host:port`).
    pub endpoint: String,
    /// As the client connects to it (`ip:port`), which failures are recorded under.
    resolved: String,
    pub devices: Vec<Device>,
    failures_before: u32,
    /// A backend per device, held for the worker's life: ggml's client keeps a connection
    /// only while something holds it, and connecting again could fail anywhere.
    held: Vec<NonNull<sys::ggml_backend>>,
}

unsafe impl Send for RpcWorker {}
unsafe impl Sync for RpcWorker {}

impl Drop for RpcWorker {
    fn drop(&mut self) {
        for backend in &self.held {
            unsafe { sys::ggml_backend_free(backend.as_ptr()) }
        }
    }
}

impl RpcWorker {
    /// Connects to the worker at `endpoint` (`host:port`), agrees on the protocol and lists
    /// its devices. Every later wait on it lasts at most `timeout`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an endpoint that is not `host:port`; [`Error::Backend`]
    /// for a worker that is down, does not answer, or speaks another protocol version.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<RpcWorker> {
        let resolved = resolve(endpoint)?;
        unsafe { sys::elelem_rpc_client_mode(timeout.as_millis().clamp(1, i32::MAX as u128) as i32) };
        let failures_before = failures(&resolved).0;
        let c_endpoint = CString::new(endpoint).expect("resolve refused NUL");
        let mut why = [0 as c_char; 512];
        let reg = unsafe { sys::elelem_rpc_add_server(c_endpoint.as_ptr(), why.as_mut_ptr(), why.len()) };
        if reg.is_null() {
            return Err(Error::Backend(format!(
                "RPC worker {endpoint}: {} (is `elelem rpc-server` running there, of this version?)",
                message(&why)
            )));
        }
        let mut worker = RpcWorker {
            endpoint: endpoint.to_string(),
            resolved,
            devices: Vec::new(),
            failures_before,
            held: Vec::new(),
        };
        for i in 0..unsafe { sys::ggml_backend_reg_dev_count(reg) } {
            let dev = unsafe { sys::ggml_backend_reg_dev_get(reg, i) };
            let backend = worker.backend_on(dev)?;
            worker.held.push(backend);
            worker.devices.push(Device::of(dev));
        }
        worker.check()?;
        Ok(worker)
    }

    /// `Err(Error::Backend)` once a connection to this worker has failed since it was
    /// reached: it died, closed the connection, timed out or answered garbage.
    pub fn check(&self) -> Result<()> {
        let (count, why) = failures(&self.resolved);
        if count > self.failures_before {
            return Err(Error::Backend(format!(
                "RPC worker {} failed: {why}; reopen the model once the worker is back",
                self.endpoint
            )));
        }
        Ok(())
    }

    /// A backend on one of its devices, for a context's graphs.
    pub fn backend(&self, device: &Device) -> Result<NonNull<sys::ggml_backend>> {
        self.backend_on(device.dev)
    }

    fn backend_on(&self, dev: sys::ggml_backend_dev_t) -> Result<NonNull<sys::ggml_backend>> {
        let mut why = [0 as c_char; 512];
        let backend = unsafe { sys::elelem_rpc_backend_init(dev, why.as_mut_ptr(), why.len()) };
        let backend = NonNull::new(backend)
            .ok_or_else(|| Error::Backend(format!("RPC worker {}: {}", self.endpoint, message(&why))))?;
        if let Err(e) = self.check() {
            unsafe { sys::ggml_backend_free(backend.as_ptr()) };
            return Err(e);
        }
        Ok(backend)
    }
}

fn resolve(endpoint: &str) -> Result<String> {
    let invalid = || {
        Error::InvalidArgument(format!(
            "an RPC endpoint is host:port (as 127.0.0.1:50052), got {endpoint:?}"
        ))
    };
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(invalid)?;
    let port: u16 = port.parse().map_err(|_| invalid())?;
    if host.is_empty() || endpoint.contains('\0') {
        return Err(invalid());
    }
    // As ggml's client (gethostbyname): the first IPv4 address.
    (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Backend(format!("RPC worker {endpoint}: cannot resolve {host}: {e}")))?
        .find(|a| a.is_ipv4())
        .map(|a| a.to_string())
        .ok_or_else(|| Error::Backend(format!("RPC worker {endpoint}: {host} has no IPv4 address")))
}

fn failures(resolved: &str) -> (u32, String) {
    let endpoint = CString::new(resolved).expect("an address has no NUL");
    let mut why = [0 as c_char; 512];
    let count = unsafe { sys::elelem_rpc_failures(endpoint.as_ptr(), why.as_mut_ptr(), why.len()) };
    (count, message(&why))
}

fn message(buf: &[c_char]) -> String {
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

/// Serves this process's CPU to RPC clients at `host:port` until the process ends, as
/// llama.cpp's `rpc-server` does: `n_threads` threads per graph, and with `cache_dir`
/// large tensors kept there by hash, so a client need not send them again. SIGINT and
/// SIGTERM end the process from then on. Returns only when the server cannot start.
pub fn serve(host: &str, port: u16, n_threads: usize, cache_dir: Option<&str>) -> Result<()> {
    let cpu = super::device::cpu()?;
    let endpoint =
        CString::new(format!("{host}:{port}")).map_err(|_| Error::InvalidArgument("the host has a NUL byte".into()))?;
    let cache = cache_dir
        .map(|d| CString::new(d).map_err(|_| Error::InvalidArgument("the cache directory has a NUL byte".into())))
        .transpose()?;
    let mut devices = [cpu.dev];
    unsafe {
        sys::elelem_rpc_serve(
            endpoint.as_ptr(),
            cache.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            n_threads,
            devices.as_mut_ptr(),
            devices.len(),
        )
    };
    Err(Error::Backend(format!(
        "the RPC server could not listen on {host}:{port} (taken, or not an address of this machine?)"
    )))
}
