// miniaudio's MP3 and FLAC decoders (dr_mp3, dr_flac), from the pinned llama.cpp package
// (vendor/ggml/miniaudio), for elelem's audio input: a lossy format's last bits are its
// decoder's, and llama.cpp's mtmd-helper decodes audio with miniaudio's ma_decoder, so
// elelem takes its MP3 and FLAC samples from the same code. Only the decoding part is
// compiled; WAV is left out (elelem reads WAV in Rust, and no file that is not RIFF is
// a WAV to dr_wav, so the order the decoder tries FLAC then MP3 in stays mtmd-helper's).
//
// The decoder is asked for f32 at the file's own channels and rate: the FLAC and MP3
// backends then decode straight to f32 (the format mtmd-helper's f32 request gives them
// too) and the decoder converts nothing, so the mix-down and the resampling stay elelem's
// Rust ones, miniaudio's own as they run for a float WAV (ext/engine/src/audio).
// Static, behind elelem_ names: a program may link its own miniaudio.
#define MINIAUDIO_IMPLEMENTATION
#define MA_API static
#define MA_NO_DEVICE_IO
#define MA_NO_THREADING
#define MA_NO_RESOURCE_MANAGER
#define MA_NO_NODE_GRAPH
#define MA_NO_ENGINE
#define MA_NO_GENERATION
#define MA_NO_ENCODING
#define MA_NO_WAV
#define MA_NO_STDIO
// The one global miniaudio does not make static, renamed as the functions are.
#define ma_atomic_global_lock elelem_ma_atomic_global_lock
#include "miniaudio.h"

#include <stdint.h>
#include <stdlib.h>

// A decoder over `bytes` (which must outlive it) and what it says of the file: channels,
// rate, and its length in frames (0 where it cannot say). NULL where no decoder takes the
// bytes, `*error` then miniaudio's result code.
void * elelem_ma_open(const uint8_t * bytes, size_t len, uint32_t * channels, uint32_t * rate, uint64_t * length,
                      int * error) {
    ma_decoder * decoder = (ma_decoder *) malloc(sizeof(ma_decoder));
    if (decoder == NULL) {
        *error = MA_OUT_OF_MEMORY;
        return NULL;
    }
    ma_decoder_config config = ma_decoder_config_init(ma_format_f32, 0, 0);
    ma_result result = ma_decoder_init_memory(bytes, len, &config, decoder);
    if (result != MA_SUCCESS) {
        free(decoder);
        *error = result;
        return NULL;
    }
    *channels = decoder->outputChannels;
    *rate = decoder->outputSampleRate;
    ma_uint64 frames = 0;
    if (ma_decoder_get_length_in_pcm_frames(decoder, &frames) != MA_SUCCESS) {
        frames = 0;
    }
    *length = frames;
    return decoder;
}

// Up to `frames` interleaved frames into `out`: how many (0 at the end), or minus
// miniaudio's result code where decoding fails.
int64_t elelem_ma_read(void * decoder, float * out, uint64_t frames) {
    ma_uint64 read = 0;
    ma_result result = ma_decoder_read_pcm_frames((ma_decoder *) decoder, out, frames, &read);
    if (result != MA_SUCCESS && result != MA_AT_END) {
        return (int64_t) result;  // miniaudio's failures are negative
    }
    return (int64_t) read;
}

void elelem_ma_close(void * decoder) {
    ma_decoder_uninit((ma_decoder *) decoder);
    free(decoder);
}

// miniaudio's words for a result code (a static string).
const char * elelem_ma_result(int result) { return ma_result_description((ma_result) result); }
