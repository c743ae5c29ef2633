# frozen_string_literal: true

module Elelem
  # The base of every error elelem raises on its own account.
  class Error < StandardError; end

  # The file is missing, unreadable, not a GGUF or malformed; or a model elelem does not run
  # ({UnsupportedModel}).
  class LoadError < Error; end

  # A well-formed model that elelem does not run as llama.cpp would: an architecture it does
  # not run ({Elelem.supported_architectures} lists those it does), or a tensor or
  # `<arch>.` metadata key its architecture would ignore. The message names it and says
  # whether llama.cpp runs it. Refused at load, never loaded and decoded differently.
  class UnsupportedModel < LoadError; end

  # A chat template failed to render: its syntax, a value it cannot use, or its own
  # `raise_exception` (a template refusing a role it does not take, say).
  class TemplateError < Error; end

  # `tools:` given for a chat whose template cannot show them to the model (its prompt is
  # the same with and without them, as with gemma-3-270m's built-in format): the model
  # would never learn of the tools. Pass a `template:` that renders tools, or no tools.
  class ToolsNotSupportedError < Error; end

  # A text to embed or rerank is longer than the model takes at once (an ArgumentError, as
  # any bad input): `truncate: true` cuts it instead, for {Embeddings#embed}.
  class InputTooLongError < ArgumentError
    # @return [Integer] the text's tokens
    attr_reader :tokens
    # @return [Integer] the most tokens the model embeds at once
    attr_reader :limit

    # @param tokens [Integer]
    # @param limit [Integer]
    # @param hint [String] how to cut it, in the caller's terms
    def initialize(tokens, limit, hint = nil)
      @tokens = tokens
      @limit = limit
      super("a text of #{tokens} tokens is longer than the #{limit} this model embeds at once#{" (#{hint})" if hint}")
    end
  end

  # An image that cannot be taken (an ArgumentError, as any bad input): not a PNG, JPEG, WebP
  # or GIF elelem decodes, corrupt, of a size it refuses (see {Elelem::Images}), or one the
  # projector cannot encode.
  class ImageError < ArgumentError; end

  # Audio that cannot be taken (an ArgumentError, as any bad input): not a WAV (16-bit PCM or
  # 32-bit float), MP3 or FLAC file of 1 Hz to 384 kHz that elelem decodes, corrupt, or too short.
  class AudioError < ArgumentError; end

  # A prompt does not fit the context window (`n_ctx`).
  class ContextFullError < Error; end

  # The model was used after {Model#close}, or closed while the call ran.
  class ClosedError < Error; end

  # Every sequence of the model is busy and its queue of waiting requests is full
  # (`Elelem.open(..., parallel:, queue:)`); try again later.
  class BusyError < Error; end

  # A draft model for speculative decoding ({Elelem.open}'s `draft:`) whose vocabulary is
  # not the target model's (another type, other special tokens, or other token texts, as
  # llama.cpp's `common_speculative_are_compatible` checks): it cannot draft for it.
  class IncompatibleDraftError < Error; end

  # A model directory did not convert to GGUF ({Elelem.convert}): a file is missing or
  # malformed, or the model is not one the converter knows (only BERT converts).
  class ConvertError < Error; end

  # ggml's CPU backend cannot be loaded. In the precompiled gem: the variant
  # `ELELEM_CPU_VARIANT` names is not one of the gem's, or this CPU cannot run it (the
  # message says what it lacks and which variants it runs).
  class CpuError < Error; end

  # A backend beyond the CPU failed: an RPC worker ({Elelem.open}'s `rpc:`) that is down,
  # died, did not answer within `rpc_timeout`, answered garbage or speaks another protocol
  # version. A model whose worker failed cannot compute again: close it and open it anew.
  class BackendError < Error; end

  # A native computation was stopped by an interrupt that Ruby then did not raise.
  class InterruptedError < Error; end

  # A Hugging Face reference (`hf:org/repo:Q4_K_M`, `hf:org/repo/file.gguf`; see {Hub}) that
  # could not be resolved or downloaded. A {LoadError}: the model cannot be opened.
  class HubError < LoadError; end

  # No such repository, revision or file on the Hub, or no GGUF of the quantization asked for
  # (the Hub answers 401 for a repository it hides from the caller, so a private one reads as missing).
  class HubNotFoundError < HubError; end

  # The repository is gated or private and `HF_TOKEN` is missing, refused, or of an account
  # without access to it.
  class HubAuthError < HubError; end

  # A file is needed that is not in the cache, while `HF_HUB_OFFLINE` is set or the Hub cannot
  # be reached.
  class HubOfflineError < HubError; end

  # A downloaded file whose size or checksum (sha256 for LFS files, git's blob sha1 for others)
  # is not the one the Hub announced; it is deleted, never used.
  class HubIntegrityError < HubError; end
end
