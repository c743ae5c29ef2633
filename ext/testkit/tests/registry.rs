//! The registry against the pinned llama.cpp: the list of architectures llama.cpp
//! runs, which refusals quote, is its `src/llama-arch.cpp`'s, and every
//! architecture elelem runs is one of them.

use std::path::PathBuf;
use std::process::Command;

use elelem_engine::arch::{lookup, LLAMA_CPP_ARCHITECTURES, REGISTRY};
use elelem_engine::Error;
use serde_json::Value;

/// The pinned llama-cpp-sys-2 package's llama.cpp tree, where cargo unpacked it for
/// `vendor/fetch` (`rake vendor`, which the build needs, fetches it).
fn llama_cpp_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--offline",
            "--locked",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(root.join("vendor/fetch/Cargo.toml"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "llama-cpp-sys-2")
        .expect("vendor/fetch depends on llama-cpp-sys-2");
    PathBuf::from(package["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .join("llama.cpp")
}

#[test]
fn llama_cpp_architectures_are_the_pinned_llama_cpps() {
    let source = std::fs::read_to_string(llama_cpp_dir().join("src/llama-arch.cpp")).unwrap();
    let table = &source[source.find("LLM_ARCH_NAMES").unwrap()..];
    let table = &table[..table.find("};").unwrap()];
    let names: Vec<&str> = table
        .lines()
        .filter_map(|line| line.trim().strip_prefix("{ LLM_ARCH_"))
        .filter_map(|entry| entry.split('"').nth(1))
        .filter(|&name| name != "clip" && name != "(unknown)")
        .collect();
    assert_eq!(LLAMA_CPP_ARCHITECTURES, names.as_slice());
}

#[test]
fn every_registered_architecture_is_one_llama_cpp_runs() {
    for spec in REGISTRY {
        assert!(LLAMA_CPP_ARCHITECTURES.contains(&spec.name), "{}", spec.name);
        assert!(lookup(spec.name).is_ok());
    }
}

#[test]
fn an_architecture_elelem_does_not_run_is_unsupported_saying_whether_llama_cpp_does() {
    let message = |name: &str| match lookup(name) {
        Err(Error::Unsupported(msg)) => msg,
        other => panic!("{name}: {other:?}"),
    };
    assert!(message("mamba").contains("architecture 'mamba' is not one elelem runs (llama.cpp runs it)"));
    assert!(message("nonesuch").contains("(llama.cpp does not know it either)"));
}
