// The test kit's window on the pinned llama.cpp's audio path, for tests/audio.rs:
// tools/mtmd/mtmd-audio.cpp's whisper preprocessor (the log-mel spectrogram and its
// 3000-frame pieces) on the hyper-parameters clip.cpp's loader sets for the whisper-style
// projectors, and miniaudio's decoder as mtmd-helper calls it (decode_audio_from_buf).
// Compiled by build.rs from the pinned package's sources, with clip_get_hparams renamed
// to the function below; never linked into the gem.

#include "mtmd-audio.h"

#define MINIAUDIO_IMPLEMENTATION
#define MA_NO_ENCODING
#define MA_NO_DEVICE_IO
#define MA_NO_RESOURCE_MANAGER
#define MA_NO_NODE_GRAPH
#define MA_NO_ENGINE
#define MA_NO_GENERATION
#define MA_API static
#include "miniaudio/miniaudio.h"

#include <cstdint>
#include <cstring>
#include <vector>

// clip.cpp's logger, quiet.
static void quiet_log(enum ggml_log_level, const char *, void *) {}
struct clip_logger_state elelem_audio_logger_state = {quiet_log, nullptr};

// The preprocessor's "context" is the hyper-parameters themselves.
const clip_hparams * elelem_audio_clip_get_hparams(const struct clip_ctx * ctx) {
    return reinterpret_cast<const clip_hparams *>(ctx);
}

extern "C" {

// The whisper preprocessor's pieces of `samples`, n_mel x 3000 floats each, written one
// after another to `out` (at most `cap` floats): their count of floats, or -1 where mtmd
// refuses the audio, -2 where `cap` is too small.
int64_t elelem_mtmd_whisper_mel(int32_t n_mel, const float * samples, size_t n_samples, float * out, int64_t cap) {
    // clip.cpp's load_hparams for PROJECTOR_TYPE_ULTRAVOX, QWEN2A, VOXTRAL.
    clip_hparams hp;
    hp.n_mel_bins        = n_mel;
    hp.audio_chunk_len   = 30;
    hp.audio_sample_rate = 16000;
    hp.audio_n_fft       = 400;
    hp.audio_window_len  = 400;
    hp.audio_hop_len     = 160;
    mtmd_audio_preprocessor_whisper pre(reinterpret_cast<const clip_ctx *>(&hp));
    pre.initialize();
    std::vector<mtmd_audio_mel> chunks;
    if (!pre.preprocess(samples, n_samples, chunks)) {
        return -1;
    }
    int64_t n = 0;
    for (const auto & c : chunks) {
        n += (int64_t) c.data.size();
    }
    if (n > cap) {
        return -2;
    }
    for (const auto & c : chunks) {
        std::memcpy(out, c.data.data(), c.data.size() * sizeof(float));
        out += c.data.size();
    }
    return n;
}

// miniaudio's decoding of a file in memory to mono f32 at `rate`, as mtmd-helper's
// decode_audio_from_buf: the frame count, samples written to `out` (at most `cap`), or -1
// where it fails, -2 where `cap` is too small.
int64_t elelem_miniaudio_decode(const uint8_t * buf, size_t len, int32_t rate, float * out, int64_t cap) {
    ma_decoder_config config = ma_decoder_config_init(ma_format_f32, 1, rate);
    ma_decoder decoder;
    if (ma_decoder_init_memory(buf, len, &config, &decoder) != MA_SUCCESS) {
        return -1;
    }
    ma_uint64 frame_count = 0;
    ma_uint64 frames_read = 0;
    if (ma_decoder_get_length_in_pcm_frames(&decoder, &frame_count) != MA_SUCCESS) {
        ma_decoder_uninit(&decoder);
        return -1;
    }
    if ((int64_t) frame_count > cap) {
        ma_decoder_uninit(&decoder);
        return -2;
    }
    // mtmd-helper sizes its buffer to the length and keeps it whole, read or not.
    std::vector<float> pcm(frame_count);
    ma_result r = ma_decoder_read_pcm_frames(&decoder, pcm.data(), frame_count, &frames_read);
    ma_decoder_uninit(&decoder);
    if (r != MA_SUCCESS) {
        return -1;
    }
    std::memcpy(out, pcm.data(), pcm.size() * sizeof(float));
    return (int64_t) frame_count;
}

}
