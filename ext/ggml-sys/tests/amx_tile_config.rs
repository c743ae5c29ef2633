#![cfg(target_arch = "x86_64")]
//! The AMX miscompile check, on any x86-64 CPU (no AMX needed).
//!
//! GCC 12 deletes the stores that fill ggml's tile configuration before `ldtilecfg`
//! (see `include/elelem_amx.h`), and an AMX CPU then faults on the garbage. This test
//! compiles ggml's own `ggml_tile_config_init`, taken from the vendored `amx/mmq.cpp`, with
//! the compiler and flags of the build, and runs it with the `ldtilecfg` mnemonic turned
//! into an assembler macro that copies the 64 bytes it would load. Those bytes must equal
//! the configuration the source writes (the same function with a plain `memcpy`). It also
//! shows that the check catches the bug: on GCC before 13, the same code compiled without
//! `elelem_amx.h` must load a different configuration.

use std::path::{Path, PathBuf};
use std::process::Command;

include!("../src/variants.rs");

/// `ldtilecfg MEM` as a macro: saves %rsi and %rax, copies MEM's 64 bytes into
/// `elelem_seen`, restores them. No instruction of it needs AMX or AVX.
const RECORDING_LDTILECFG: &str = r#"
#include <cstdint>
#include <cstdio>
#include <cstring>
extern "C" { unsigned char elelem_seen[64]; unsigned long elelem_saved_rsi, elelem_saved_rax; }
__asm__(".macro ldtilecfg mem\n"
        "  movq %rsi, elelem_saved_rsi(%rip)\n"
        "  movq %rax, elelem_saved_rax(%rip)\n"
        "  leaq \\mem, %rsi\n"
        "  .irp off,0,8,16,24,32,40,48,56\n"
        "  movq \\off(%rsi), %rax\n"
        "  movq %rax, elelem_seen+\\off(%rip)\n"
        "  .endr\n"
        "  movq elelem_saved_rax(%rip), %rax\n"
        "  movq elelem_saved_rsi(%rip), %rsi\n"
        ".endm\n");
#include <immintrin.h>
"#;

/// The same function, its load replaced by a copy: the configuration the source means.
const PLAIN_COPY: &str = r#"
#include <cstdint>
#include <cstdio>
#include <cstring>
extern "C" { unsigned char elelem_seen[64]; }
#define _tile_loadconfig(config) std::memcpy(elelem_seen, (config), 64)
"#;

const MAIN: &str = r#"
// A frame of its own, as ggml's worker lambda: nothing after the load reads the config.
__attribute__((noinline)) void configure_tiles() { ggml_tile_config_init(); }
int main() {
    configure_tiles();
    for (int i = 0; i < 64; i++) std::printf("%d ", elelem_seen[i]);
    return 0;
}
"#;

fn ggml_dir() -> PathBuf {
    std::env::var_os("ELELEM_GGML_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../vendor/ggml"))
}

/// `struct tile_config_t` and `ggml_tile_config_init` as the vendored mmq.cpp has them.
fn ggml_tile_config_source() -> String {
    let path = ggml_dir().join("src/ggml-cpu/amx/mmq.cpp");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let item = |start: &str, tail: &str| -> String {
        let begin = text.find(start).unwrap_or_else(|| {
            panic!(
                "{} no longer has `{start}`: update this check and elelem_amx.h",
                path.display()
            )
        });
        let mut depth = 0;
        for (i, c) in text[begin..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return format!("{}{tail}\n", &text[begin..=begin + i]);
                    }
                }
                _ => {}
            }
        }
        panic!("unbalanced braces after `{start}` in {}", path.display())
    };
    item("struct tile_config_t", ";") + &item("inline void ggml_tile_config_init(void)", "")
}

/// Compiles `source` as the build compiles ggml's C++ (`-O3`, gnu++17, `flags`), runs it
/// and returns the 64 bytes it printed.
fn loaded_config(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Vec<u8> {
    let cpp = dir.join(format!("{name}.cpp"));
    let exe = dir.join(name);
    std::fs::write(&cpp, source).unwrap();
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let status = Command::new(&compiler)
        .args(["-std=gnu++17", "-O3", "-DNDEBUG", "-o"])
        .arg(&exe)
        .args(flags)
        .arg(&cpp)
        .status()
        .expect("could not run the C++ compiler");
    assert!(
        status.success(),
        "{compiler} failed on {} with {flags:?}",
        cpp.display()
    );
    let output = Command::new(&exe).output().unwrap();
    assert!(output.status.success(), "{} failed", exe.display());
    String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .map(|b| b.parse().unwrap())
        .collect()
}

fn gcc_major() -> Option<u32> {
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let out = Command::new(compiler)
        .args(["-dM", "-E", "-x", "c++", "/dev/null"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if text.contains("__clang__") {
        return None;
    }
    text.lines()
        .find_map(|l| l.strip_prefix("#define __GNUC__ "))
        .and_then(|v| v.trim().parse().ok())
}

/// The flag sets to try: the AMX flags alone (runnable on any x86-64), and the
/// `sapphirerapids` variant's whole set where this CPU runs its non-AMX instructions.
fn flag_sets() -> Vec<Vec<String>> {
    let mut sets = vec![["-mamx-tile", "-mamx-int8", "-mamx-bf16"].map(String::from).to_vec()];
    let runs_variant = std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512cd")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512dq")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vbmi")
        && std::is_x86_feature_detected!("avx512vnni")
        && std::is_x86_feature_detected!("avx512bf16")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
        && std::is_x86_feature_detected!("bmi2");
    if runs_variant {
        let (flags, _) = X86.flags(X86.spec("sapphirerapids").unwrap());
        sets.push(flags);
    }
    sets
}

#[test]
fn ggml_tile_config_reaches_ldtilecfg_whole() {
    let dir = std::env::temp_dir().join(format!("elelem-amx-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ggml = ggml_tile_config_source();
    // What build.rs forces into every ggml source, not a flag of this test's own.
    let force = env!("ELELEM_GGML_FORCED_INCLUDE");
    assert!(
        force.ends_with("elelem_amx.h"),
        "ggml's sources are compiled without elelem_amx.h: {force}"
    );

    let meant = loaded_config(&dir, "meant", &format!("{PLAIN_COPY}{ggml}{MAIN}"), &[]);
    assert_eq!(meant[0], 1, "palette 1: {meant:?}");
    assert!(meant[48..].iter().any(|&r| r != 0), "rows set: {meant:?}");

    let recorded = format!("{RECORDING_LDTILECFG}{ggml}{MAIN}");
    for flags in flag_sets() {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut fixed_flags = vec![force];
        fixed_flags.extend(&flags);
        let fixed = loaded_config(&dir, "fixed", &recorded, &fixed_flags);
        assert_eq!(
            fixed, meant,
            "with elelem_amx.h and {flags:?}, ldtilecfg loads another configuration"
        );

        let unfixed = loaded_config(&dir, "unfixed", &recorded, &flags);
        match gcc_major() {
            Some(major) if major < 13 => assert_ne!(
                unfixed, meant,
                "GCC {major}'s own _tile_loadconfig loaded the whole configuration: the check no longer sees the bug"
            ),
            _ => {
                eprintln!("this compiler's own _tile_loadconfig loads {unfixed:?} (GCC 13+ and clang are not affected)")
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
