#![cfg(not(ggml_backend_dl))] // the CPU backend is linked in only in the default build
//! The whole chain through the raw bindings: a graph in a `no_alloc` context,
//! allocated by `ggml_gallocr`, inputs written with `ggml_backend_tensor_set`,
//! computed on the CPU backend, read back with `ggml_backend_tensor_get`; and
//! a GGUF written and read back with ggml's own gguf API.

use std::ffi::{CStr, CString};

use ggml_sys::*;

#[test]
fn gallocr_graph_computes_hand_checked_values() {
    unsafe {
        let n_tensors = 16;
        let params = ggml_init_params {
            mem_size: ggml_tensor_overhead() * n_tensors + ggml_graph_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        let ctx = ggml_init(params);
        assert!(!ctx.is_null());

        // a: 2 rows of 3, b: 2 columns of 3 (ggml's ne[0] is the row length).
        let a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2);
        let b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2);
        let bias = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2);
        for t in [a, b, bias] {
            ggml_set_input(t);
        }
        let product = ggml_mul_mat(ctx, a, b); // [2, 2]: product[j][i] = dot(a row i, b column j)
        let out = ggml_add(ctx, product, bias);
        ggml_set_output(out);
        let graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, out);

        let backend = ggml_backend_cpu_init();
        assert!(!backend.is_null());
        let galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
        assert!(ggml_gallocr_alloc_graph(galloc, graph));
        assert!(ggml_gallocr_get_buffer_size(galloc, 0) > 0);

        let set = |t: *mut ggml_tensor, v: &[f32]| ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, size_of_val(v));
        set(a, &[1., 2., 3., 4., 5., 6.]);
        set(b, &[1., 0., -1., 2., 2., 2.]);
        set(bias, &[0.5, -0.5]);
        ggml_backend_cpu_set_n_threads(backend, 2);
        assert_eq!(ggml_backend_graph_compute(backend, graph), GGML_STATUS_SUCCESS);

        let mut got = [0f32; 4];
        ggml_backend_tensor_get(out, got.as_mut_ptr().cast(), 0, size_of_val(&got));
        // column 0 = b[0] = (1,0,-1): a·b = (1-3, 4-6) = (-2,-2); + bias
        // column 1 = b[1] = (2,2,2):  a·b = (12, 30);              + bias
        assert_eq!(got, [-1.5, -2.5, 12.5, 29.5]);

        ggml_gallocr_free(galloc);
        ggml_backend_free(backend);
        ggml_free(ctx);
    }
}

#[test]
fn gguf_written_and_read_back() {
    let path = std::env::temp_dir().join(format!("ggml-sys-{}.gguf", std::process::id()));
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    unsafe {
        let ctx = ggml_init(ggml_init_params {
            mem_size: 1 << 16,
            mem_buffer: std::ptr::null_mut(),
            no_alloc: false,
        });
        let w = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
        ggml_set_name(w, c"w".as_ptr());
        let data = std::slice::from_raw_parts_mut((*w).data as *mut f32, 4);
        data.copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);

        let out = gguf_init_empty();
        gguf_set_val_str(out, c"general.architecture".as_ptr(), c"llama".as_ptr());
        gguf_set_val_u32(out, c"llama.block_count".as_ptr(), 7);
        gguf_add_tensor(out, w);
        assert!(gguf_write_to_file(out, cpath.as_ptr(), false));
        gguf_free(out);
        ggml_free(ctx);

        let mut data_ctx: *mut ggml_context = std::ptr::null_mut();
        let read = gguf_init_from_file(
            cpath.as_ptr(),
            gguf_init_params {
                no_alloc: false,
                ctx: &mut data_ctx,
            },
        );
        assert!(!read.is_null());
        let key = gguf_find_key(read, c"llama.block_count".as_ptr());
        assert_eq!(gguf_get_val_u32(read, key), 7);
        let arch = gguf_get_val_str(read, gguf_find_key(read, c"general.architecture".as_ptr()));
        assert_eq!(CStr::from_ptr(arch).to_str().unwrap(), "llama");
        let t = ggml_get_tensor(data_ctx, c"w".as_ptr());
        let values = std::slice::from_raw_parts((*t).data as *const f32, 4);
        assert_eq!(values, [1.0, 2.0, 3.0, 4.0]);
        gguf_free(read);
        ggml_free(data_ctx);
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn reports_the_vendored_version() {
    let version = unsafe { CStr::from_ptr(ggml_version()) }.to_str().unwrap();
    assert_eq!(version, GGML_VERSION);
}
