//! The CPU backend in use: linked in (the default build), or one of the variant libraries
//! of a variants build, chosen as llama.cpp's `ggml_backend_load_best("cpu", ...)` chooses
//! (the highest `ggml_backend_score` among them), or forced by `ELELEM_CPU_VARIANT`.
//!
//! Before a variant library is opened at all (scoring opens it), this CPU's features are
//! read (x86-64: CPUID, operating-system support included (XCR0); aarch64: Linux's
//! hardware capabilities), so a variant the CPU cannot run is refused with an error naming
//! what it lacks, never run into a SIGILL.

use std::sync::OnceLock;

use crate::BuiltVariant;

/// The environment variable that forces a variant (`ELELEM_CPU_VARIANT=haswell`).
pub const VARIANT_ENV: &str = "ELELEM_CPU_VARIANT";

/// The CPU backend this process uses.
#[derive(Debug)]
pub struct Loaded {
    /// The variant, in a variants build.
    pub variant: Option<&'static BuiltVariant>,
    /// Its library.
    pub path: Option<std::path::PathBuf>,
    /// Whether `ELELEM_CPU_VARIANT` chose it.
    pub forced: bool,
    /// The library's handle (`dlopen`), for the symbols the registry does not hand out.
    #[allow(dead_code)]
    handle: usize,
}

static LOADED: OnceLock<Result<Loaded, String>> = OnceLock::new();

/// Loads the CPU backend once per process (a variants build registers the chosen
/// variant with ggml's registry); later calls return the same answer.
///
/// # Errors
/// In a variants build: no variant library beside `libelelem-ggml.so`, a forced variant
/// that was not built or that this CPU cannot run, or a library that fails to load.
pub fn load() -> Result<&'static Loaded, String> {
    LOADED.get_or_init(load_now).as_ref().map_err(Clone::clone)
}

#[cfg(not(ggml_backend_dl))]
fn load_now() -> Result<Loaded, String> {
    if let Some(name) = std::env::var(VARIANT_ENV).ok().filter(|s| !s.is_empty()) {
        // Ignoring it would promise bits this build does not give.
        return Err(format!(
            "{VARIANT_ENV}={name}: this build has one CPU backend, compiled for {}, and no variants to choose \
             from (the precompiled gem has them)",
            if crate::GGML_CPU_FLAGS.is_empty() {
                "the baseline ISA"
            } else {
                crate::GGML_CPU_FLAGS
            }
        ));
    }
    Ok(Loaded {
        variant: None,
        path: None,
        forced: false,
        handle: 0,
    })
}

#[cfg(ggml_backend_dl)]
fn load_now() -> Result<Loaded, String> {
    dl::load()
}

/// Whether the CPU backend has a dot product for weights of `ty` (some types exist only
/// as the other operand's format: a matmul over them would call a null kernel).
pub fn type_has_vec_dot(ty: crate::ggml_type) -> bool {
    #[cfg(not(ggml_backend_dl))]
    {
        unsafe { (*crate::ggml_get_type_traits_cpu(ty)).vec_dot.is_some() }
    }
    #[cfg(ggml_backend_dl)]
    {
        dl::type_has_vec_dot(ty)
    }
}

/// The features of llama.cpp's variant list (`SSE42`, `AVX2`, `AVX512`, `AMX_INT8`, ...;
/// `DOTPROD`, `SVE`, `MATMUL_INT8`, ... on aarch64) that this CPU and the operating system
/// support.
pub fn cpu_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        x86::features()
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    {
        let (hwcap, hwcap2) = unsafe { (libc::getauxval(libc::AT_HWCAP), libc::getauxval(libc::AT_HWCAP2)) };
        aarch64_features(hwcap, hwcap2)
    }
    #[cfg(not(any(target_arch = "x86_64", all(target_arch = "aarch64", target_os = "linux"))))]
    {
        Vec::new()
    }
}

/// The aarch64 features that Linux's `AT_HWCAP` and `AT_HWCAP2` words report, read as
/// ggml's `ggml_feats_get_arch64_runtime` (`ggml-feats.h`) reads them for its score, so
/// the variant refused here is the one ggml would score 0.
#[cfg(any(test, all(target_arch = "aarch64", target_os = "linux")))]
pub fn aarch64_features(hwcap: u64, hwcap2: u64) -> Vec<&'static str> {
    const HWCAP_FPHP: u64 = 1 << 9;
    const HWCAP_ASIMDHP: u64 = 1 << 10;
    const HWCAP_ASIMDDP: u64 = 1 << 20;
    const HWCAP_SVE: u64 = 1 << 22;
    const HWCAP2_SVE2: u64 = 1 << 1;
    const HWCAP2_I8MM: u64 = 1 << 13;
    const HWCAP2_SME: u64 = 1 << 23;
    [
        ("DOTPROD", hwcap & HWCAP_ASIMDDP != 0),
        (
            "FP16_VECTOR_ARITHMETIC",
            hwcap & HWCAP_FPHP != 0 && hwcap & HWCAP_ASIMDHP != 0,
        ),
        ("SVE", hwcap & HWCAP_SVE != 0),
        ("MATMUL_INT8", hwcap2 & HWCAP2_I8MM != 0),
        ("SVE2", hwcap2 & HWCAP2_SVE2 != 0),
        ("SME", hwcap2 & HWCAP2_SME != 0),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect()
}

/// The SVE vector length in use, as a build-profile entry (`SVE_BITS_256`), on aarch64
/// Linux with SVE: ggml's SVE kernels pick their code by it (`svcntb()`), and CPUs differ
/// (Graviton 3: 256 bits, Graviton 4: 128), so with SVE compiled in it decides the bits as
/// much as a macro does.
pub fn sve_bits_tag() -> Option<&'static str> {
    static TAG: OnceLock<Option<String>> = OnceLock::new();
    TAG.get_or_init(|| sve_bytes().map(|bytes| format!("SVE_BITS_{}", bytes * 8)))
        .as_deref()
}

/// Linux's `prctl(PR_SVE_GET_VL)`: this thread's vector length in bytes, where SVE is.
fn sve_bytes() -> Option<u32> {
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    {
        const PR_SVE_GET_VL: libc::c_int = 51;
        const PR_SVE_VL_LEN_MASK: libc::c_int = 0xffff;
        let vl = unsafe { libc::prctl(PR_SVE_GET_VL) };
        (vl > 0).then(|| (vl & PR_SVE_VL_LEN_MASK) as u32)
    }
    #[cfg(not(all(target_arch = "aarch64", target_os = "linux")))]
    {
        None
    }
}

/// Why ggml's AMX kernels cannot run in this process, or `None` when they can: the CPU
/// must report AMX-INT8 (CPUID), the operating system must enable the tile state (XCR0
/// bits 17 and 18; hypervisors may hide it), and Linux must grant this process the
/// tile-data permission (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, which ggml asks for too).
/// Each thread repeats the request before its first tile load (`include/elelem_amx.h`).
pub fn amx_refusal() -> Option<String> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let (cpuid, os) = x86::amx_support();
        amx_refusal_given(cpuid, os, x86::request_amx_permission)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        Some("AMX runs only on x86-64 Linux here".to_string())
    }
}

/// [`amx_refusal`] from its facts: CPUID's AMX-INT8 bit, XCR0's tile bits, and the
/// permission request (made only when both are set).
pub fn amx_refusal_given(
    cpuid: bool,
    os_enabled: bool,
    request_permission: impl FnOnce() -> std::io::Result<()>,
) -> Option<String> {
    if !cpuid {
        return Some("this CPU does not report AMX-INT8".to_string());
    }
    if !os_enabled {
        return Some(
            "the operating system (or the hypervisor) does not enable the AMX tile state (XCR0 bits 17-18)".to_string(),
        );
    }
    request_permission()
        .err()
        .map(|e| format!("Linux refused this process the AMX tile-data permission (arch_prctl: {e})"))
}

/// In a variants build, why the variant loaded runs without AMX although the CPU reports
/// AMX-INT8 and a variant with AMX was built (`sapphirerapids`): the operating system or a
/// hypervisor hides the tile state (XCR0), so the chooser refused that variant. `None` in a
/// source build (its AMX is [`amx_refusal`]'s), on a CPU without AMX, or with AMX in use.
pub fn amx_variant_passed_over() -> Option<String> {
    let loaded = load().ok()?.variant?;
    #[cfg(target_arch = "x86_64")]
    let (cpuid, os_enabled) = x86::amx_support();
    #[cfg(not(target_arch = "x86_64"))]
    let (cpuid, os_enabled) = (false, false);
    amx_passed_over(loaded, crate::BUILT_VARIANTS, cpuid, os_enabled)
}

/// [`amx_variant_passed_over`] from its facts: the variant loaded, those built, CPUID's
/// AMX-INT8 bit and XCR0's tile bits.
pub fn amx_passed_over(loaded: &BuiltVariant, built: &[BuiltVariant], cpuid: bool, os_enabled: bool) -> Option<String> {
    let has_amx = |v: &&BuiltVariant| v.features.contains(&"AMX_INT8");
    let with_amx = built.iter().find(has_amx)?;
    if !cpuid || has_amx(&loaded) {
        return None;
    }
    // No permission is asked: no variant with AMX runs.
    let reason = amx_refusal_given(cpuid, os_enabled, || Ok(()))?;
    Some(format!(
        "ggml's AMX kernels are built in (the {} variant), but {reason}; the {} variant runs instead",
        with_amx.name, loaded.name
    ))
}

/// The features of `variant` missing from `have`.
pub fn missing<'a>(variant: &'a BuiltVariant, have: &[&str]) -> Vec<&'a str> {
    variant.features.iter().copied().filter(|f| !have.contains(f)).collect()
}

/// The variant to load: the one `forced` names (refused when it was not built or `have`
/// lacks a feature of it), or else the runnable one with the highest `score` (ggml's
/// `ggml_backend_score`; 0 means it cannot run), the first of equals.
///
/// # Errors
/// A message that says what was asked, what is missing, and what this CPU can run.
pub fn choose<'a>(
    built: &[&'a BuiltVariant],
    have: &[&str],
    forced: Option<&str>,
    mut score: impl FnMut(&BuiltVariant) -> i32,
) -> Result<&'a BuiltVariant, String> {
    let runnable: Vec<&'a BuiltVariant> = built.iter().copied().filter(|v| missing(v, have).is_empty()).collect();
    let names = |list: &[&BuiltVariant]| list.iter().map(|v| v.name).collect::<Vec<_>>().join(", ");
    if let Some(name) = forced {
        let Some(&variant) = built.iter().find(|v| v.name == name) else {
            return Err(format!(
                "{VARIANT_ENV}={name}: no such CPU variant in this build (built: {}; this CPU runs: {})",
                built.iter().map(|v| v.name).collect::<Vec<_>>().join(", "),
                names(&runnable)
            ));
        };
        let lacking = missing(variant, have);
        if !lacking.is_empty() {
            return Err(format!(
                "{VARIANT_ENV}={name}: this CPU cannot run the {name} variant: it lacks {} (this CPU runs: {})",
                lacking.join(", "),
                names(&runnable)
            ));
        }
        if score(variant) == 0 {
            return Err(format!(
                "{VARIANT_ENV}={name}: ggml's score says this CPU cannot run it"
            ));
        }
        return Ok(variant);
    }
    let mut best: Option<(&'a BuiltVariant, i32)> = None;
    for variant in runnable {
        let s = score(variant);
        if s > 0 && best.is_none_or(|(_, b)| s > b) {
            best = Some((variant, s));
        }
    }
    best.map(|(v, _)| v).ok_or_else(|| {
        format!(
            "no CPU variant of this build runs on this CPU (built: {}; this CPU has: {})",
            built.iter().map(|v| v.name).collect::<Vec<_>>().join(", "),
            have.join(" ")
        )
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};

    /// CPUID and XCR0, as ggml's `cpu-feats.cpp` reads CPUID, plus the operating system's
    /// consent to the AVX, AVX-512 and AMX register states.
    // `__cpuid` is safe in newer Rust, `unsafe` in the minimum version.
    #[allow(unused_unsafe)]
    pub fn features() -> Vec<&'static str> {
        let max = unsafe { __cpuid(0) }.eax;
        let leaf1 = unsafe { __cpuid(1) };
        let (b7, c7, d7) = if max >= 7 {
            let l = unsafe { __cpuid_count(7, 0) };
            (l.ebx, l.ecx, l.edx)
        } else {
            (0, 0, 0)
        };
        let a7_1 = if max >= 7 {
            unsafe { __cpuid_count(7, 1) }.eax
        } else {
            0
        };
        let osxsave = leaf1.ecx & (1 << 27) != 0;
        let xcr0 = if osxsave { unsafe { xgetbv0() } } else { 0 };
        let avx_os = xcr0 & 0x6 == 0x6;
        let avx512_os = avx_os && xcr0 & 0xe0 == 0xe0;
        let amx_os = xcr0 & 0x6_0000 == 0x6_0000;
        let bit = |reg: u32, n: u32| reg & (1 << n) != 0;

        let mut have = Vec::new();
        let mut add = |name: &'static str, on: bool| {
            if on {
                have.push(name);
            }
        };
        add("SSE42", bit(leaf1.ecx, 20));
        add("F16C", avx_os && bit(leaf1.ecx, 29));
        add("FMA", avx_os && bit(leaf1.ecx, 12));
        add("BMI2", bit(b7, 8));
        add("AVX", avx_os && bit(leaf1.ecx, 28));
        add("AVX2", avx_os && bit(b7, 5));
        add("AVX_VNNI", avx_os && bit(a7_1, 4));
        // ggml's AVX512: F, CD, VL, DQ and BW.
        add("AVX512", avx512_os && [16, 28, 31, 17, 30].iter().all(|&n| bit(b7, n)));
        add("AVX512_VBMI", avx512_os && bit(c7, 1));
        add("AVX512_VNNI", avx512_os && bit(c7, 11));
        add("AVX512_BF16", avx512_os && bit(a7_1, 5));
        add("AMX_TILE", amx_os && bit(d7, 24));
        add("AMX_INT8", amx_os && bit(d7, 25));
        add("AMX_BF16", amx_os && bit(d7, 22));
        have
    }

    /// Whether CPUID reports AMX-TILE and AMX-INT8, and whether XCR0 enables their state.
    #[allow(unused_unsafe)]
    pub fn amx_support() -> (bool, bool) {
        if unsafe { __cpuid(0) }.eax < 7 {
            return (false, false);
        }
        let d7 = unsafe { __cpuid_count(7, 0) }.edx;
        let osxsave = unsafe { __cpuid(1) }.ecx & (1 << 27) != 0;
        let xcr0 = if osxsave { unsafe { xgetbv0() } } else { 0 };
        (d7 & (3 << 24) == 3 << 24, xcr0 & 0x6_0000 == 0x6_0000)
    }

    /// Asks Linux for the AMX tile-data state for this process (idempotent).
    #[cfg(target_os = "linux")]
    pub fn request_amx_permission() -> std::io::Result<()> {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        match unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    #[target_feature(enable = "xsave")]
    unsafe fn xgetbv0() -> u64 {
        _xgetbv(0)
    }
}

#[cfg(ggml_backend_dl)]
mod dl {
    use std::ffi::{c_int, c_void, CStr, CString};
    use std::path::{Path, PathBuf};

    use super::{Loaded, VARIANT_ENV};

    /// The directory of `libelelem-ggml.so` (where the variants lie), from the dynamic
    /// loader's record of the library that holds `ggml_backend_load`.
    fn library_dir() -> Result<PathBuf, String> {
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let addr = crate::ggml_backend_load as *const c_void;
        if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
            return Err("cannot find where libelelem-ggml.so was loaded from (dladdr)".into());
        }
        let file = PathBuf::from(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().to_string());
        let file = std::fs::canonicalize(&file).unwrap_or(file);
        Ok(file.parent().map(Path::to_path_buf).unwrap_or_default())
    }

    fn dlerror() -> String {
        let e = unsafe { libc::dlerror() };
        if e.is_null() {
            "unknown error".into()
        } else {
            unsafe { CStr::from_ptr(e) }.to_string_lossy().to_string()
        }
    }

    fn open(path: &Path, flags: c_int) -> Result<*mut c_void, String> {
        let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        let handle = unsafe { libc::dlopen(c.as_ptr(), flags) };
        if handle.is_null() {
            Err(format!("cannot load {}: {}", path.display(), dlerror()))
        } else {
            Ok(handle)
        }
    }

    fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
        unsafe { libc::dlsym(handle, name.as_ptr()) }
    }

    /// `ggml_backend_score` of the library at `path` (0 when it cannot run or has none),
    /// opened and closed again as ggml's `ggml_backend_load_best` does.
    fn score(path: &Path) -> i32 {
        let Ok(handle) = open(path, libc::RTLD_NOW | libc::RTLD_LOCAL) else {
            return 0;
        };
        let f = symbol(handle, c"ggml_backend_score");
        let s = if f.is_null() {
            0
        } else {
            let f: extern "C" fn() -> c_int = unsafe { std::mem::transmute(f) };
            f()
        };
        unsafe { libc::dlclose(handle) };
        s
    }

    pub(super) fn load() -> Result<Loaded, String> {
        let dir = library_dir()?;
        let path_of = |name: &str| dir.join(format!("libggml-cpu-{name}.so"));
        let present: Vec<&'static crate::BuiltVariant> = crate::BUILT_VARIANTS
            .iter()
            .filter(|v| path_of(v.name).is_file())
            .collect();
        if present.is_empty() {
            return Err(format!(
                "no CPU variant library (libggml-cpu-*.so) in {}",
                dir.display()
            ));
        }
        let forced = std::env::var(VARIANT_ENV).ok().filter(|s| !s.is_empty());
        let have = super::cpu_features();
        let variant = super::choose(&present, &have, forced.as_deref(), |v| score(&path_of(v.name)))?;
        let path = path_of(variant.name);
        let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        if unsafe { crate::ggml_backend_load(c.as_ptr()) }.is_null() {
            return Err(format!(
                "ggml could not load the {} CPU variant ({})",
                variant.name,
                path.display()
            ));
        }
        // The registry holds the library open; this handle only looks symbols up in it.
        let handle = open(&path, libc::RTLD_NOW | libc::RTLD_NOLOAD)?;
        Ok(Loaded {
            variant: Some(variant),
            path: Some(path),
            forced: forced.is_some(),
            handle: handle as usize,
        })
    }

    pub(super) fn type_has_vec_dot(ty: crate::ggml_type) -> bool {
        let Ok(loaded) = super::load() else {
            return false;
        };
        let f = symbol(loaded.handle as *mut c_void, c"ggml_get_type_traits_cpu");
        if f.is_null() {
            return false;
        }
        let f: extern "C" fn(crate::ggml_type) -> *const crate::ggml_type_traits_cpu =
            unsafe { std::mem::transmute(f) };
        let traits = f(ty);
        !traits.is_null() && unsafe { (*traits).vec_dot.is_some() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn v(name: &'static str, features: &'static [&'static str]) -> BuiltVariant {
        BuiltVariant {
            name,
            features,
            flags: "",
            compiler: "",
            isa: &[],
        }
    }

    const VARIANTS: &[BuiltVariant] = &[
        v("x64", &[]),
        v("haswell", &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"]),
        v("skylakex", &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512"]),
    ];
    const AVX2_CPU: &[&str] = &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"];

    fn built() -> Vec<&'static BuiltVariant> {
        VARIANTS.iter().collect()
    }

    fn ggml_like_score(v: &BuiltVariant) -> i32 {
        1 + v.features.len() as i32
    }

    #[test]
    fn a_variant_with_amx_passed_over_because_the_tile_state_is_hidden_is_named() {
        const BUILT: &[BuiltVariant] = &[v("zen4", &["AVX512"]), v("sapphirerapids", &["AVX512", "AMX_INT8"])];
        let (zen4, spr) = (&BUILT[0], &BUILT[1]);
        let hidden = amx_passed_over(zen4, BUILT, true, false).unwrap();
        assert!(
            hidden.contains("the sapphirerapids variant") && hidden.contains("XCR0"),
            "{hidden}"
        );
        assert!(hidden.ends_with("the zen4 variant runs instead"), "{hidden}");
        assert_eq!(amx_passed_over(zen4, BUILT, false, false), None, "a CPU without AMX");
        assert_eq!(
            amx_passed_over(zen4, BUILT, true, true),
            None,
            "zen4 forced on an AMX CPU"
        );
        assert_eq!(amx_passed_over(spr, BUILT, true, true), None, "AMX in use");
        assert_eq!(
            amx_passed_over(zen4, &BUILT[..1], true, false),
            None,
            "no AMX variant built"
        );
    }

    #[test]
    fn the_best_runnable_variant_wins() {
        let chosen = choose(&built(), AVX2_CPU, None, ggml_like_score).unwrap();
        assert_eq!(chosen.name, "haswell");
        let chosen = choose(&built(), &[], None, ggml_like_score).unwrap();
        assert_eq!(chosen.name, "x64");
    }

    #[test]
    fn a_variant_the_cpu_lacks_is_never_scored() {
        let mut scored = Vec::new();
        choose(&built(), AVX2_CPU, None, |v| {
            scored.push(v.name);
            1
        })
        .unwrap();
        assert_eq!(scored, ["x64", "haswell"]);
    }

    #[test]
    fn a_forced_variant_is_used_or_refused_saying_why() {
        assert_eq!(
            choose(&built(), AVX2_CPU, Some("x64"), ggml_like_score).unwrap().name,
            "x64"
        );
        let err = choose(&built(), AVX2_CPU, Some("skylakex"), ggml_like_score).unwrap_err();
        assert!(
            err.contains("cannot run the skylakex variant: it lacks AVX512"),
            "{err}"
        );
        assert!(err.contains("this CPU runs: x64, haswell"), "{err}");
        let err = choose(&built(), AVX2_CPU, Some("zen9"), ggml_like_score).unwrap_err();
        assert!(
            err.contains("no such CPU variant in this build (built: x64, haswell, skylakex"),
            "{err}"
        );
        let err = choose(&built(), AVX2_CPU, Some("haswell"), |_| 0).unwrap_err();
        assert!(err.contains("ggml's score"), "{err}");
    }

    #[test]
    fn amx_is_refused_for_each_missing_piece_and_asks_permission_last() {
        let asked = std::cell::Cell::new(false);
        let grant = || {
            asked.set(true);
            Ok(())
        };
        let cpu = amx_refusal_given(false, true, grant).unwrap();
        assert!(cpu.contains("does not report AMX-INT8"), "{cpu}");
        assert!(!asked.get());
        let hidden = amx_refusal_given(true, false, grant).unwrap();
        assert!(hidden.contains("hypervisor") && hidden.contains("XCR0"), "{hidden}");
        assert!(!asked.get());
        let refused = amx_refusal_given(true, true, || Err(std::io::Error::from_raw_os_error(libc::EPERM))).unwrap();
        assert!(
            refused.contains("refused") && refused.contains("Operation not permitted"),
            "{refused}"
        );
        assert_eq!(amx_refusal_given(true, true, grant), None);
        assert!(asked.get());
    }

    #[test]
    fn amx_refusal_agrees_with_the_cpu_features() {
        // Where AMX is in the features (CPUID and XCR0 both), only the permission can refuse it.
        let refusal = amx_refusal();
        if cpu_features().contains(&"AMX_INT8") {
            assert!(refusal.as_ref().is_none_or(|r| r.contains("arch_prctl")), "{refusal:?}");
        } else {
            assert!(refusal.is_some());
        }
    }

    /// `BuiltVariant`s of the aarch64 variants the platform gem ships, as build.rs makes them.
    fn aarch64_built() -> Vec<&'static BuiltVariant> {
        crate::AARCH64
            .default
            .iter()
            .map(|name| {
                let spec = crate::AARCH64.spec(name).unwrap();
                &*Box::leak(Box::new(v(spec.name, spec.features)))
            })
            .collect()
    }

    #[test]
    fn aarch64_hwcaps_choose_the_variant_ggml_would() {
        const FPHP_ASIMDHP: u64 = 3 << 9;
        const ASIMDDP: u64 = 1 << 20;
        const SVE: u64 = 1 << 22;
        const SVE2: u64 = 1 << 1;
        const I8MM: u64 = 1 << 13;
        const SME: u64 = 1 << 23;
        let cpus: &[(&str, u64, u64, &str)] = &[
            ("Cortex-A72 (Raspberry Pi 4)", 0, 0, "armv8.0_1"),
            ("Cortex-A55: dot product only", ASIMDDP, 0, "armv8.2_1"),
            (
                "Neoverse N1 (Graviton 2), Cortex-A76 (Pi 5)",
                ASIMDDP | FPHP_ASIMDHP,
                0,
                "armv8.2_2",
            ),
            (
                "Neoverse V1 (Graviton 3)",
                ASIMDDP | FPHP_ASIMDHP | SVE,
                I8MM,
                "armv8.6_1",
            ),
            (
                "Neoverse V2 (Graviton 4)",
                ASIMDDP | FPHP_ASIMDHP | SVE,
                I8MM | SVE2,
                "armv8.6_2",
            ),
            (
                "an SME CPU (qemu -cpu max)",
                ASIMDDP | FPHP_ASIMDHP | SVE,
                I8MM | SVE2 | SME,
                "armv8.6_2",
            ),
            ("half-precision scalar without vector", ASIMDDP | 1 << 9, 0, "armv8.2_1"),
        ];
        for &(cpu, hwcap, hwcap2, expected) in cpus {
            let have = aarch64_features(hwcap, hwcap2);
            let chosen = choose(&aarch64_built(), &have, None, ggml_like_score).unwrap();
            assert_eq!(chosen.name, expected, "{cpu}: {have:?}");
        }
        let graviton2 = aarch64_features(ASIMDDP | FPHP_ASIMDHP, 0);
        let err = choose(&aarch64_built(), &graviton2, Some("armv8.2_3"), ggml_like_score).unwrap_err();
        assert!(
            err.contains("it lacks SVE (this CPU runs: armv8.0_1, armv8.2_1, armv8.2_2)"),
            "{err}"
        );
    }

    #[test]
    fn variant_flags_are_ggml_cmakes() {
        let arm = |name| crate::AARCH64.flags(crate::AARCH64.spec(name).unwrap());
        assert_eq!(arm("armv8.0_1"), (vec!["-march=armv8-a".to_string()], vec![]));
        assert_eq!(
            arm("armv8.2_2"),
            (
                vec!["-march=armv8.2-a+dotprod+fp16".to_string()],
                vec![
                    "GGML_USE_DOTPROD".to_string(),
                    "GGML_USE_FP16_VECTOR_ARITHMETIC".to_string()
                ]
            )
        );
        assert_eq!(arm("armv8.6_2").0, ["-march=armv8.6-a+dotprod+fp16+sve+i8mm+sve2"]);
        assert_eq!(arm("armv9.2_2").0, ["-march=armv9.2-a+dotprod+fp16+sve+i8mm+sve2+sme"]);
        let (flags, defines) = crate::X86.flags(crate::X86.spec("haswell").unwrap());
        assert_eq!(flags, ["-msse4.2", "-mf16c", "-mfma", "-mbmi2", "-mavx", "-mavx2"]);
        assert_eq!(
            defines,
            [
                "GGML_SSE42",
                "GGML_F16C",
                "GGML_FMA",
                "GGML_BMI2",
                "GGML_AVX",
                "GGML_AVX2"
            ]
        );
        for isa in [&crate::X86, &crate::AARCH64] {
            assert!(isa.default.iter().all(|name| isa.spec(name).is_some()), "{}", isa.arch);
        }
    }

    #[test]
    fn cpu_features_are_consistent_with_std_detection() {
        let have = cpu_features();
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(have.contains(&"AVX2"), std::arch::is_x86_feature_detected!("avx2"));
            assert_eq!(have.contains(&"FMA"), std::arch::is_x86_feature_detected!("fma"));
            assert_eq!(have.contains(&"SSE42"), std::arch::is_x86_feature_detected!("sse4.2"));
            let avx512 = ["avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"];
            let std_avx512 = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512cd")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx512bw");
            assert_eq!(have.contains(&"AVX512"), std_avx512, "{avx512:?}");
        }
    }
}
