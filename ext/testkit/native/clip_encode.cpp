// The test kit's window on the pinned llama.cpp's vision encoder, for tests/vision_encoder.rs:
// tools/mtmd/clip.cpp (with tools/mtmd/models/*.cpp, its graph builders) loads a projector
// GGUF and encodes one preprocessed image with clip_image_encode, as mtmd does. Compiled by
// build.rs from the pinned package's sources, unmodified, over the test kit's ggml (the
// vendored copy of the same ggml); never linked into the gem.

#include "clip.h"
#include "clip-impl.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

// clip's log, errors only.
static void errors_only(enum ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

extern "C" {

// Encodes the `nx` x `ny` image of interleaved RGB floats `rgb` with the projector at
// `path` (flash attention on when `flash_attn`, as mtmd's "auto" resolves it on the CPU).
// Writes at most `cap` floats to `out`; returns how many the encoder produced, or -1 when
// clip refuses the file or fails.
int64_t elelem_clip_encode(const char * path, int flash_attn, int n_threads, const float * rgb, int nx, int ny,
                           float * out, int64_t cap) {
    try {
        clip_context_params params{};
        params.use_gpu = false;
        params.device = nullptr;
        params.flash_attn_type = flash_attn ? CLIP_FLASH_ATTN_TYPE_ENABLED : CLIP_FLASH_ATTN_TYPE_DISABLED;
        params.image_min_tokens = -1;
        params.image_max_tokens = -1;
        params.warmup = false;
        params.cb_eval = nullptr;
        params.cb_eval_user_data = nullptr;
        params.no_alloc = false;
        g_logger_state.log_callback = errors_only;
        clip_init_result res = clip_init(path, params);
        if (res.ctx_v == nullptr) {
            return -1;
        }
        clip_image_f32 img;
        img.set_size({nx, ny}, false, false);
        img.cpy_buf(std::vector<float>(rgb, rgb + (size_t) nx * ny * 3));
        // Sized first, as mtmd sizes it (clip copies nothing into an empty vector).
        std::vector<float> embd((size_t) clip_n_output_tokens(res.ctx_v, &img) * clip_n_mmproj_embd(res.ctx_v));
        const bool ok = clip_image_encode(res.ctx_v, n_threads, &img, embd);
        clip_free(res.ctx_v);
        if (res.ctx_a) {
            clip_free(res.ctx_a);
        }
        if (!ok) {
            return -1;
        }
        std::memcpy(out, embd.data(), sizeof(float) * (size_t) std::min<int64_t>(cap, (int64_t) embd.size()));
        return (int64_t) embd.size();
    } catch (const std::exception &) {
        return -1;
    }
}

}
