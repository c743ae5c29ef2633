// The test kit's window on the pinned llama.cpp's vision encoder, for tests/vision_encoder.rs:
// tools/mtmd/clip.cpp (with tools/mtmd/models/*.cpp, its graph builders) loads a projector
// GGUF and encodes one preprocessed image with clip_image_encode, as mtmd does, or tells
// the preprocessing parameters its loader set. Compiled by
// build.rs from the pinned package's sources, unmodified, over the test kit's ggml (the
// vendored copy of the same ggml); never linked into the gem.

#include "clip.h"
#include "clip-impl.h"
#include "clip-model.h"

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

// clip's contexts for the projector at `path`, on the CPU with mtmd's defaults (no custom
// token limits, no warmup), flash attention on when `flash_attn`, logging errors only.
static clip_init_result init_on_cpu(const char * path, bool flash_attn) {
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
    return clip_init(path, params);
}

extern "C" {

// Encodes the `nx` x `ny` image of interleaved RGB floats `rgb` with the projector at
// `path` (flash attention on when `flash_attn`, as mtmd's "auto" resolves it on the CPU).
// Writes at most `cap` floats to `out`; returns how many the encoder produced, or -1 when
// clip refuses the file or fails.
int64_t elelem_clip_encode(const char * path, int flash_attn, int n_threads, const float * rgb, int nx, int ny,
                           float * out, int64_t cap) {
    try {
        clip_init_result res = init_on_cpu(path, flash_attn);
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

// Encodes one log-mel piece (`n_mel` rows of `n_len` frames, mtmd's mtmd_audio_mel) with
// the audio projector at `path`, as mtmd encodes an audio chunk (a batch of one marked as
// audio). Writes at most `cap` floats to `out`; returns how many the encoder produced, or
// -1 when clip refuses the file or fails.
int64_t elelem_clip_encode_audio(const char * path, int flash_attn, int n_threads, const float * mel, int n_mel,
                                 int n_len, float * out, int64_t cap) {
    try {
        clip_init_result res = init_on_cpu(path, flash_attn);
        if (res.ctx_v) {
            clip_free(res.ctx_v);
        }
        if (res.ctx_a == nullptr) {
            return -1;
        }
        clip_image_f32 piece;
        piece.set_size({n_len, n_mel}, false, true);
        piece.cpy_buf(std::vector<float>(mel, mel + (size_t) n_mel * n_len));
        std::vector<float> embd((size_t) clip_n_output_tokens(res.ctx_a, &piece) * clip_n_mmproj_embd(res.ctx_a));
        clip_image_f32_batch batch;
        batch.is_audio = true;
        batch.entries.push_back(std::move(piece));
        const bool ok = clip_image_batch_encode(res.ctx_a, n_threads, &batch, embd);
        clip_free(res.ctx_a);
        if (!ok) {
            return -1;
        }
        std::memcpy(out, embd.data(), sizeof(float) * (size_t) std::min<int64_t>(cap, (int64_t) embd.size()));
        return (int64_t) embd.size();
    } catch (const std::exception &) {
        return -1;
    }
}

// The most grid pinpoints read back.
#define ELELEM_MAX_CANDIDATES 64

// The preprocessing share of clip_hparams (mtmd_image.cpp's elelem_mtmd_params), with up to
// ELELEM_MAX_CANDIDATES grid pinpoints (width, height).
struct elelem_clip_image_params {
    int32_t image_size, patch_size, n_merge, longest_edge, min_pixels, max_pixels;
    int32_t resize_algo, pad, resize_algo_rf, resize_algo_ov, pad_rf, pad_ov;
    uint8_t pad_color[3], pad_color_rf[3], pad_color_ov[3];
    float mean[3], std[3];
    int32_t n_candidates;
    int32_t candidates[2 * ELELEM_MAX_CANDIDATES];
};

// The preprocessing parameters clip.cpp's loader sets for the projector at `path` (mtmd's
// defaults: no custom token limits); 0, or -1 when clip refuses the file.
int elelem_clip_image_params(const char * path, elelem_clip_image_params * out) {
    try {
        clip_init_result res = init_on_cpu(path, false);
        if (res.ctx_v == nullptr) {
            return -1;
        }
        const clip_hparams & h = *clip_get_hparams(res.ctx_v);
        out->image_size = h.image_size;
        out->patch_size = h.patch_size;
        out->n_merge = h.n_merge;
        out->longest_edge = h.image_longest_edge;
        out->min_pixels = h.image_min_pixels;
        out->max_pixels = h.image_max_pixels;
        out->resize_algo = h.image_resize_algo;
        out->pad = h.image_resize_pad;
        out->resize_algo_rf = h.image_resize_algo_rf;
        out->resize_algo_ov = h.image_resize_algo_ov;
        out->pad_rf = h.image_pad_rf;
        out->pad_ov = h.image_pad_ov;
        for (int i = 0; i < 3; i++) {
            out->pad_color[i] = h.image_pad_color[i];
            out->pad_color_rf[i] = h.image_pad_color_rf[i];
            out->pad_color_ov[i] = h.image_pad_color_ov[i];
            out->mean[i] = h.image_mean[i];
            out->std[i] = h.image_std[i];
        }
        out->n_candidates = (int32_t) h.image_res_candidates.size();
        for (size_t i = 0; i < h.image_res_candidates.size() && i < ELELEM_MAX_CANDIDATES; i++) {
            out->candidates[2 * i] = h.image_res_candidates[i].width;
            out->candidates[2 * i + 1] = h.image_res_candidates[i].height;
        }
        clip_free(res.ctx_v);
        if (res.ctx_a) {
            clip_free(res.ctx_a);
        }
        return 0;
    } catch (const std::exception &) {
        return -1;
    }
}

}
