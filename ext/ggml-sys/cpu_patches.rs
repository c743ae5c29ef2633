// ggml's CPU backend as elelem compiles it: the vendored `src/ggml-cpu` copied into
// `OUT_DIR` with these patches applied (included by build.rs). Each replaces text found
// exactly once, so a ggml whose code moved fails the build here instead of compiling
// something else. The reference llama.cpp is built unpatched: what elelem changes
// either computes its bits or concerns only elelem.

/// The int32 slot of a `FLASH_ATTN_EXT` node's op params that fixes how many KV chunks
/// ggml's split path computes (0: one per thread, as ggml does). ggml itself uses slots 0-4.
const FA_CHUNKS_OP_PARAM: usize = 15;

struct CpuPatch {
    /// The file, relative to `src/ggml-cpu`.
    file: &'static str,
    from: &'static str,
    to: String,
}

fn cpu_patches() -> Vec<CpuPatch> {
    let slot = FA_CHUNKS_OP_PARAM;
    vec![
        // A lone query's flash attention over ≥ 512 cells is split into one KV chunk per
        // thread, and its bits depend on the chunks. With the chunk count in the node,
        // fewer threads compute the same chunks (each thread every nth one) and the same
        // bits: a context whose cores are taken runs that node on fewer threads as well
        // (ext/engine/src/ggml/threads.rs), where ggml's barrier would otherwise wait for a
        // thread that is not scheduled. With as many threads as chunks nothing changes.
        CpuPatch {
            file: "ops.cpp",
            from: "        const int64_t chunk_size = (nek1 + nth - 1) / nth;

        // Partials buffer layout: [q_head][kv_chunk][M, S, VKQ]
        const int64_t partial_size  = 2 + DV;
        float *       partials_base = (float *) params->wdata + nth * (DK + 2*DV + CACHE_LINE_SIZE_F32);

        const int64_t ic_start = ith * chunk_size;
        const int64_t ic_end   = std::min(ic_start + chunk_size, nek1);

        const int64_t partial_stride = nth * partial_size;
        float *       chunk_partials = partials_base + ith * partial_size;

        if (ic_start < nek1) {",
            to: format!(
                "        const int32_t fixed_chunks = ggml_get_op_params_i32(dst, {slot});
        const int64_t n_chunks   = fixed_chunks > 0 ? fixed_chunks : nth;
        const int64_t chunk_size = (nek1 + n_chunks - 1) / n_chunks;

        // Partials buffer layout: [q_head][kv_chunk][M, S, VKQ]
        const int64_t partial_size  = 2 + DV;
        float *       partials_base = (float *) params->wdata + nth * (DK + 2*DV + CACHE_LINE_SIZE_F32);

        const int64_t partial_stride = n_chunks * partial_size;

        for (int64_t chunk = ith; chunk < n_chunks; chunk += nth) {{
        const int64_t ic_start = chunk * chunk_size;
        const int64_t ic_end   = std::min(ic_start + chunk_size, nek1);
        float *       chunk_partials = partials_base + chunk * partial_size;

        if (ic_start < nek1) {{"
            ),
        },
        CpuPatch {
            file: "ops.cpp",
            from: "        ggml_barrier(params->threadpool);
        ggml_flash_attn_ext_reduce_partials(params, dst, nth, chunk_size);",
            to: "        }

        ggml_barrier(params->threadpool);
        ggml_flash_attn_ext_reduce_partials(params, dst, n_chunks, chunk_size);"
                .to_string(),
        },
        // The work buffer holds every chunk's partials.
        CpuPatch {
            file: "ggml-cpu.c",
            from: "size_t n_chunks = n_tasks;",
            to: format!("size_t n_chunks = MAX(n_tasks, MAX(0, ggml_get_op_params_i32(node, {slot})));"),
        },
        // Where Linux refuses the AMX permission, elelem's own warning says so once
        // (ext/engine/src/ggml/device.rs); ggml's line goes to ggml's log, shown with ELELEM_DEBUG.
        CpuPatch {
            file: "amx/amx.cpp",
            from: r#"fprintf(stderr, "AMX is not ready to be used!\n");"#,
            to: r#"GGML_LOG_WARN("AMX is not ready to be used!\n");"#.to_string(),
        },
    ]
}

/// Where the patched copy of ggml's CPU backend is, in `OUT_DIR`.
fn patched_cpu_dir(out: &Path) -> PathBuf {
    out.join("ggml-cpu")
}

/// Copies `ggml/src/ggml-cpu` to [`patched_cpu_dir`] with [`cpu_patches`] applied, and
/// writes `out/cpu_patches.rs`, which gives the crate [`FA_CHUNKS_OP_PARAM`].
fn patch_cpu_backend(ggml: &Path, out: &Path) {
    fs::write(
        out.join("cpu_patches.rs"),
        format!(
            "/// The op-param slot that fixes a flash attention's KV chunks (ggml-sys's cpu_patches.rs).\n\
             pub const FA_CHUNKS_OP_PARAM: usize = {FA_CHUNKS_OP_PARAM};\n"
        ),
    )
    .unwrap();
    let from = ggml.join("src").join("ggml-cpu");
    let dir = patched_cpu_dir(out);
    copy_tree(&from, &dir);
    for patch in cpu_patches() {
        let path = dir.join(patch.file);
        let text = fs::read_to_string(&path).unwrap();
        let found = text.matches(patch.from).count();
        assert!(
            found == 1,
            "ggml-sys: a patch of {} expects its text once, found it {found} times: {}",
            from.join(patch.file).display(),
            patch.from.lines().next().unwrap_or_default()
        );
        fs::write(&path, text.replacen(patch.from, &patch.to, 1)).unwrap();
    }
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}
