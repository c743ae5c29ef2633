//! The CPU backend, loaded once per process (linked in, or the CPU variant this
//! machine runs best), its device and the buffer types it offers for weights.

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

use ggml_sys as sys;

use super::tensor::{Context, Tensor};
use crate::{Error, Result};

/// A backend buffer type (where tensor data lives, and in which layout). These
/// are static objects of the backend: copying the handle is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferType(pub(super) sys::ggml_backend_buffer_type_t);

unsafe impl Send for BufferType {}
unsafe impl Sync for BufferType {}

impl BufferType {
    pub fn name(self) -> String {
        unsafe { CStr::from_ptr(sys::ggml_backend_buft_name(self.0)) }
            .to_string_lossy()
            .into_owned()
    }
}

/// An owned backend buffer.
pub struct Buffer(NonNull<sys::ggml_backend_buffer>);

unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    pub(crate) fn from_raw(ptr: sys::ggml_backend_buffer_t, what: &str) -> Result<Buffer> {
        NonNull::new(ptr)
            .map(Buffer)
            .ok_or_else(|| Error::OutOfMemory(what.to_string()))
    }

    /// Allocates every tensor of `ctx` in one buffer of type `buft`.
    pub fn alloc_ctx_tensors(ctx: &Context, buft: BufferType, what: &str) -> Result<Buffer> {
        Self::from_raw(
            unsafe { sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx.as_ptr(), buft.0) },
            what,
        )
    }

    pub fn as_ptr(&self) -> sys::ggml_backend_buffer_t {
        self.0.as_ptr()
    }

    pub fn size(&self) -> usize {
        unsafe { sys::ggml_backend_buffer_get_size(self.as_ptr()) }
    }

    pub fn clear(&self, value: u8) {
        unsafe { sys::ggml_backend_buffer_clear(self.as_ptr(), value) }
    }

    pub fn set_usage_weights(&self) {
        unsafe { sys::ggml_backend_buffer_set_usage(self.as_ptr(), sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { sys::ggml_backend_buffer_free(self.as_ptr()) }
    }
}

/// A device besides the CPU (an RPC worker's, a GPU): where layers of a model, their
/// caches and their part of each graph go.
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) dev: sys::ggml_backend_dev_t,
    /// ggml's name for it (`RPC0`, `Vulkan0`).
    pub name: String,
    /// What it is (an RPC device: its worker's endpoint).
    pub description: String,
    /// Where its weights and caches live.
    pub buft: BufferType,
}

unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    pub(crate) fn of(dev: sys::ggml_backend_dev_t) -> Device {
        let text = |p: *const std::ffi::c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        Device {
            dev,
            name: text(unsafe { sys::ggml_backend_dev_name(dev) }),
            description: text(unsafe { sys::ggml_backend_dev_description(dev) }),
            buft: BufferType(unsafe { sys::ggml_backend_dev_buffer_type(dev) }),
        }
    }

    /// The error for `bytes` of `what` it could not allocate.
    pub fn out_of_memory(&self, what: &str, bytes: usize) -> crate::Error {
        crate::Error::Backend(format!(
            "{} ({}) could not allocate {:.1} MiB of {what}: too little memory there for its share of the model \
             (give it fewer layers with tensor_split or n_gpu_layers)",
            self.name,
            self.description,
            bytes as f64 / f64::from(1 << 20)
        ))
    }

    /// A backend of its own on this device (for a device of this machine: a Vulkan GPU),
    /// owned by the caller.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] when ggml cannot start one.
    pub fn init_backend(&self) -> Result<NonNull<sys::ggml_backend>> {
        NonNull::new(unsafe { sys::ggml_backend_dev_init(self.dev, std::ptr::null()) }).ok_or_else(|| {
            Error::Backend(format!(
                "{} ({}): ggml could not start its backend",
                self.name, self.description
            ))
        })
    }

    /// Whether it can run `op` with its weight `weight` held in its own buffer.
    pub fn supports_op_with_buft(&self, op: Tensor, weight: Tensor) -> bool {
        supports_op_in(self.dev, op, weight, self.buft)
    }

    /// Its free and total memory, in bytes, as it reports them.
    pub fn memory(&self) -> (usize, usize) {
        let (mut free, mut total) = (0, 0);
        unsafe { sys::ggml_backend_dev_memory(self.dev, &mut free, &mut total) };
        (free, total)
    }
}

/// The devices of this machine that take offloaded layers, as llama.cpp picks them by
/// default: every GPU of ggml's registry (in a build with `ELELEM_VULKAN=1`, Vulkan's),
/// once per device id; the integrated GPUs only when there is no other. RPC workers'
/// devices are not among them (they come with their workers). ggml's Vulkan backend leaves
/// out devices of type CPU, such as Mesa's lavapipe, unless `GGML_VK_VISIBLE_DEVICES`
/// names them; `GGML_DISABLE_VULKAN` hides all of them.
pub fn local_devices() -> Result<Vec<Device>> {
    init()?;
    let mut gpus: Vec<(Device, Option<String>)> = Vec::new();
    let mut igpus = Vec::new();
    for i in 0..unsafe { sys::ggml_backend_dev_count() } {
        let dev = unsafe { sys::ggml_backend_dev_get(i) };
        let reg = unsafe { sys::ggml_backend_dev_backend_reg(dev) };
        if reg.is_null() || unsafe { CStr::from_ptr(sys::ggml_backend_reg_name(reg)) } == c"RPC" {
            continue;
        }
        match unsafe { sys::ggml_backend_dev_type(dev) } {
            sys::GGML_BACKEND_DEVICE_TYPE_GPU => {
                let mut props = sys::ggml_backend_dev_props::default();
                unsafe { sys::ggml_backend_dev_get_props(dev, &mut props) };
                let id = (!props.device_id.is_null()).then(|| {
                    unsafe { CStr::from_ptr(props.device_id) }
                        .to_string_lossy()
                        .into_owned()
                });
                if id.is_none() || !gpus.iter().any(|(_, other)| *other == id) {
                    gpus.push((Device::of(dev), id));
                }
            }
            sys::GGML_BACKEND_DEVICE_TYPE_IGPU => igpus.push(Device::of(dev)),
            _ => {}
        }
    }
    if gpus.is_empty() {
        return Ok(igpus);
    }
    Ok(gpus.into_iter().map(|(d, _)| d).collect())
}

/// ggml's Vulkan backend in this build: `on`, or `off: <why>`.
pub fn vulkan_build() -> &'static str {
    sys::GGML_VULKAN
}

/// The CPU device and the buffer types it offers for weights, best first: the
/// "extra" types (repacked layouts such as q4_K_8x8) before the plain one,
/// as llama.cpp orders them.
pub struct CpuDevice {
    dev: sys::ggml_backend_dev_t,
    pub weight_bufts: Vec<BufferType>,
}

impl CpuDevice {
    pub fn get() -> Result<CpuDevice> {
        let cpu = cpu()?;
        let mut weight_bufts = extra_bufts(cpu.get_extra_bufts, cpu.dev);
        // ggml checks only the permission; an AMX buffer is used only where every check passed.
        weight_bufts.retain(|b| b.name() != AMX_BUFFER || cpu.amx == Amx::InUse);
        weight_bufts.push(BufferType(unsafe { sys::ggml_backend_cpu_buffer_type() }));
        Ok(CpuDevice {
            dev: cpu.dev,
            weight_bufts,
        })
    }

    /// Whether the device can run `op` with its weight held in a buffer of type `buft`
    /// (the repacked types accept only some shapes and types).
    pub fn supports_op_with_buft(&self, op: Tensor, weight: Tensor, buft: BufferType) -> bool {
        supports_op_in(self.dev, op, weight, buft)
    }
}

/// Whether `dev` can run `op` with its weight `weight` in a (zero-byte) buffer of type `buft`.
fn supports_op_in(dev: sys::ggml_backend_dev_t, op: Tensor, weight: Tensor, buft: BufferType) -> bool {
    unsafe {
        let probe = sys::ggml_backend_buft_alloc_buffer(buft.0, 0);
        if probe.is_null() {
            return false;
        }
        (*weight.as_ptr()).buffer = probe;
        let ok = sys::ggml_backend_dev_supports_op(dev, op.as_ptr());
        (*weight.as_ptr()).buffer = std::ptr::null_mut();
        sys::ggml_backend_buffer_free(probe);
        ok
    }
}

/// The CPU backend's device and the functions its registry hands out
/// (`ggml_backend_reg_get_proc_address`), which work the same whether the backend is
/// linked in or a variant library loaded at run time.
pub(super) struct Cpu {
    pub(super) dev: sys::ggml_backend_dev_t,
    pub(super) reg: sys::ggml_backend_reg_t,
    pub(super) set_n_threads: SetNThreads,
    pub(super) set_abort_callback: SetAbortCallback,
    pub(super) threadpool_new: ThreadpoolNew,
    pub(super) threadpool_free: ThreadpoolFree,
    pub(super) set_threadpool: SetThreadpool,
    pub(super) get_extra_bufts: Option<GetExtraBufts>,
    pub(super) get_features: Option<GetFeatures>,
    pub(super) set_use_ref: Option<SetUseRef>,
    pub(super) amx: Amx,
}

/// ggml's AMX kernels (Intel's tile instructions, the fastest prompt path of the CPUs that
/// have them) in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Amx {
    /// Not compiled into the CPU backend in use.
    NotBuilt,
    /// Compiled in and usable: the weight types they take go to ggml's AMX buffer.
    InUse,
    /// Compiled in but unusable here, and why; the AVX-512 path runs instead.
    Off(String),
}

impl Amx {
    /// The state, given whether the backend was compiled with AMX, whether ggml offers its
    /// AMX buffer type, and what [`sys::cpu::amx_refusal`] says. That is asked only of a
    /// build with AMX: it requests the tile-data permission, which grows every signal
    /// frame of the process (and the alternate signal stack it needs).
    fn decide(built: bool, offered: bool, refusal: impl FnOnce() -> Option<String>) -> Amx {
        if !built {
            return Amx::NotBuilt;
        }
        match refusal() {
            Some(reason) => Amx::Off(reason),
            None if offered => Amx::InUse,
            None => Amx::Off("ggml's CPU backend did not offer its AMX buffer".to_string()),
        }
    }
}

type SetNThreads = unsafe extern "C" fn(sys::ggml_backend_t, i32);
type SetAbortCallback = unsafe extern "C" fn(sys::ggml_backend_t, sys::ggml_abort_callback, *mut c_void);
type ThreadpoolNew = unsafe extern "C" fn(*mut sys::ggml_threadpool_params) -> *mut sys::ggml_threadpool;
type ThreadpoolFree = unsafe extern "C" fn(*mut sys::ggml_threadpool);
type SetThreadpool = unsafe extern "C" fn(sys::ggml_backend_t, *mut sys::ggml_threadpool);
type GetExtraBufts = unsafe extern "C" fn(sys::ggml_backend_dev_t) -> *mut sys::ggml_backend_buffer_type_t;
type GetFeatures = unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *mut sys::ggml_backend_feature;
type SetUseRef = unsafe extern "C" fn(sys::ggml_backend_t, bool);

// SAFETY: the device and registry are process-wide ggml singletons, never freed.
unsafe impl Send for Cpu {}
unsafe impl Sync for Cpu {}

static CPU: std::sync::OnceLock<std::result::Result<Cpu, String>> = std::sync::OnceLock::new();

/// Process-wide ggml setup, once: ggml's log routed to stderr only when `ELELEM_DEBUG` is
/// set (ggml logs freely otherwise), then the CPU backend loaded (in a variants build, the
/// variant this CPU runs best or the one `ELELEM_CPU_VARIANT` forces) and its functions
/// looked up.
pub(super) fn cpu() -> Result<&'static Cpu> {
    CPU.get_or_init(|| unsafe {
        if std::env::var_os("ELELEM_DEBUG").is_none() {
            unsafe extern "C" fn quiet(_: sys::ggml_log_level, _: *const std::ffi::c_char, _: *mut c_void) {}
            sys::ggml_log_set(Some(quiet), std::ptr::null_mut());
        }
        sys::cpu::load()?;
        let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        if dev.is_null() {
            return Err("ggml has no CPU device".into());
        }
        let reg = sys::ggml_backend_dev_backend_reg(dev);
        let proc_ = |name: &CStr| sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
        let get_extra_bufts =
            std::mem::transmute::<*mut c_void, Option<GetExtraBufts>>(proc_(c"ggml_backend_dev_get_extra_bufts"));
        let amx = Amx::decide(
            amx_built()?,
            extra_bufts(get_extra_bufts, dev).iter().any(|b| b.name() == AMX_BUFFER),
            sys::cpu::amx_refusal,
        );
        if let Amx::Off(reason) = &amx {
            eprintln!(
                "elelem: warning: ggml's AMX kernels are built in, but {reason}; matrix products use AVX-512 instead"
            );
        } else if let Some(why) = sys::cpu::amx_variant_passed_over() {
            eprintln!("elelem: warning: {why}");
        }
        let required = |name: &CStr| {
            let p = proc_(name);
            if p.is_null() {
                Err(format!("ggml's CPU backend has no {}", name.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        Ok(Cpu {
            dev,
            reg,
            set_n_threads: std::mem::transmute::<*mut c_void, SetNThreads>(required(c"ggml_backend_set_n_threads")?),
            set_abort_callback: std::mem::transmute::<*mut c_void, SetAbortCallback>(required(
                c"ggml_backend_set_abort_callback",
            )?),
            threadpool_new: std::mem::transmute::<*mut c_void, ThreadpoolNew>(required(c"ggml_threadpool_new")?),
            threadpool_free: std::mem::transmute::<*mut c_void, ThreadpoolFree>(required(c"ggml_threadpool_free")?),
            set_threadpool: std::mem::transmute::<*mut c_void, SetThreadpool>(required(
                c"ggml_backend_cpu_set_threadpool",
            )?),
            get_extra_bufts,
            get_features: std::mem::transmute::<*mut c_void, Option<GetFeatures>>(proc_(c"ggml_backend_get_features")),
            set_use_ref: std::mem::transmute::<*mut c_void, Option<SetUseRef>>(proc_(c"ggml_backend_cpu_set_use_ref")),
            amx,
        })
    })
    .as_ref()
    .map_err(|e| Error::Cpu(e.clone()))
}

/// The name of ggml's AMX weight buffer type.
const AMX_BUFFER: &str = "AMX";

/// Whether the CPU backend in use was compiled with ggml's AMX kernels.
fn amx_built() -> std::result::Result<bool, String> {
    let isa: Vec<&str> = match sys::cpu::load()?.variant {
        Some(variant) => variant.features.to_vec(),
        None => sys::GGML_ISA.split_whitespace().collect(),
    };
    Ok(isa.contains(&"AMX_INT8"))
}

/// The CPU device's extra weight buffer types (repacked layouts, AMX), best first.
fn extra_bufts(get_extra: Option<GetExtraBufts>, dev: sys::ggml_backend_dev_t) -> Vec<BufferType> {
    let mut bufts = Vec::new();
    if let Some(get_extra) = get_extra {
        unsafe {
            let mut p = get_extra(dev);
            while !p.is_null() && !(*p).is_null() {
                bufts.push(BufferType(*p));
                p = p.add(1);
            }
        }
    }
    bufts
}

/// ggml's AMX kernels in this process (loads the CPU backend if it is not yet).
///
/// # Errors
/// [`Error::Cpu`] when the CPU backend cannot be loaded.
pub fn amx() -> Result<&'static Amx> {
    Ok(&cpu()?.amx)
}

/// Loads the CPU backend (see [`cpu`]) if it is not yet.
///
/// # Errors
/// [`Error::Cpu`] when it cannot be loaded.
pub fn init() -> Result<()> {
    cpu().map(|_| ())
}

/// The CPU variant in use, in a build with variants (`None` when the backend is linked in).
pub fn cpu_variant() -> Result<Option<&'static sys::BuiltVariant>> {
    init()?;
    Ok(sys::cpu::load().map_err(Error::Cpu)?.variant)
}

/// A CPU variant of this build (none in a build that links its CPU backend in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuVariantInfo {
    pub name: &'static str,
    /// The features ggml compiles it for (`AVX2`, `AVX512_VNNI`, ...).
    pub features: &'static [&'static str],
    /// Whether this CPU (and the operating system) supports them all.
    pub runnable: bool,
    /// Whether this process runs it.
    pub in_use: bool,
}

/// Every CPU variant this build compiled, in llama.cpp's order.
pub fn cpu_variants() -> Vec<CpuVariantInfo> {
    let have = sys::cpu::cpu_features();
    let in_use = cpu().ok().and_then(|_| sys::cpu::load().ok()).and_then(|l| l.variant);
    sys::BUILT_VARIANTS
        .iter()
        .map(|v| CpuVariantInfo {
            name: v.name,
            features: v.features,
            runnable: sys::cpu::missing(v, &have).is_empty(),
            in_use: in_use.is_some_and(|u| u.name == v.name),
        })
        .collect()
}

/// ggml's CPU features as its backend reports them (`ggml_backend_get_features`, what
/// llama.cpp's system info prints), e.g. "SSE3 SSSE3 AVX ... REPACK", after
/// `CPU_VARIANT=<name>` in a build with variants.
pub fn system_info() -> Result<String> {
    let cpu = cpu()?;
    let mut parts = Vec::new();
    if let Some(variant) = cpu_variant()? {
        parts.push(format!("CPU_VARIANT={}", variant.name));
    }
    if let Some(get_features) = cpu.get_features {
        unsafe {
            let mut f = get_features(cpu.reg);
            while !f.is_null() && !(*f).name.is_null() {
                let name = CStr::from_ptr((*f).name).to_string_lossy();
                let value = CStr::from_ptr((*f).value).to_string_lossy();
                f = f.add(1);
                if name.starts_with("AMX") && matches!(cpu.amx, Amx::Off(_)) {
                    continue;
                }
                parts.push(if value == "1" {
                    name.to_string()
                } else {
                    format!("{name}={value}")
                });
            }
        }
    }
    if matches!(cpu.amx, Amx::Off(_)) {
        parts.push("AMX=off".to_string());
    }
    parts.push(match sys::GGML_VULKAN.strip_prefix("off: ") {
        Some(why) => format!("VULKAN=off ({why})"),
        None => {
            let devices = local_devices()?;
            let names: Vec<String> = devices
                .iter()
                .map(|d| format!("{}={}", d.name, d.description))
                .collect();
            format!(
                "VULKAN=on ({})",
                if names.is_empty() {
                    "no usable device".to_string()
                } else {
                    names.join(", ")
                }
            )
        }
    });
    Ok(parts.join(" "))
}

/// Whether the CPU backend can multiply weights of `ty`. Some types exist only as
/// the other operand's format (Q8_1, Q8_K): a matmul over them calls a null kernel.
pub fn cpu_has_vec_dot(ty: sys::ggml_type) -> bool {
    init().is_ok() && sys::cpu::type_has_vec_dot(ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amx_is_used_only_where_it_is_built_offered_and_not_refused() {
        let not_asked = || -> Option<String> { panic!("a build without AMX asks nothing") };
        assert_eq!(Amx::decide(false, true, not_asked), Amx::NotBuilt);
        assert_eq!(Amx::decide(true, true, || None), Amx::InUse);
        assert_eq!(
            Amx::decide(true, true, || Some("hidden".into())),
            Amx::Off("hidden".into())
        );
        assert!(matches!(Amx::decide(true, false, || None), Amx::Off(r) if r.contains("did not offer")));
    }

    #[test]
    fn no_amx_buffer_holds_weights_unless_amx_is_in_use() {
        let device = CpuDevice::get().unwrap();
        let has_amx = device.weight_bufts.iter().any(|b| b.name() == AMX_BUFFER);
        assert_eq!(has_amx, *amx().unwrap() == Amx::InUse);
    }
}
