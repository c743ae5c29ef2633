# frozen_string_literal: true

require "digest"

module Elelem
  class Server
    module Ollama
      # Ollama's listings of the served model: `GET /api/tags` (the models there are),
      # `POST /api/show` (one model's details, template and GGUF hyper-parameters),
      # `GET /api/ps` (the models loaded, with their memory) and `GET /api/version`.
      module Catalog
        # What each path answers, and to which methods.
        ROUTES = {
          "/api/tags" => [%w[GET HEAD], :ollama_tags], "/api/show" => [%w[POST], :ollama_show],
          "/api/ps" => [%w[GET HEAD], :ollama_ps], "/api/version" => [%w[GET HEAD], :ollama_version]
        }.freeze
        # The hyper-parameters `/api/show` lists, under their GGUF keys (`ARCH.` prefixed),
        # from {Model#info}.
        HYPER_PARAMETERS = {
          "block_count" => :n_layer, "context_length" => :n_ctx_train, "embedding_length" => :n_embd,
          "feed_forward_length" => :n_ff, "attention.head_count" => :n_head,
          "attention.head_count_kv" => :n_head_kv, "rope.freq_base" => :rope_freq_base, "vocab_size" => :n_vocab
        }.freeze

        private

        def ollama_tags(_env)
          json(200, { models: [ollama_model.merge(modified_at: ollama_modified_at)] })
        end

        # The model's details, its chat template, its GGUF hyper-parameters (`model_info`) and
        # what it can do (`capabilities`: `completion`, `tools`, `insert`, or `embedding`).
        def ollama_show(env)
          retrieval_body(env)
          model = model_for(nil)
          json(200, { modelfile: "FROM #{model.info[:path]}\n", parameters: "", template: ollama_template(model),
                      details: ollama_details(model.info), model_info: ollama_model_info(model),
                      capabilities: ollama_capabilities(model), modified_at: ollama_modified_at })
        end

        # The one model, always loaded (it never expires): its memory is its weights, KV
        # cache and compute buffer.
        def ollama_ps(_env)
          model = model_for(nil)
          stats = model.stats
          size = stats.values_at(:weights_bytes, :kv_cache_bytes, :compute_buffer_bytes).sum
          vram = model.info[:backend] == "CPU" ? { size_vram: 0 } : {}
          json(200, { models: [ollama_model.merge(size:, **vram, context_length: model.info[:n_ctx])] })
        end

        def ollama_version(_env)
          json(200, { version: VERSION })
        end

        def ollama_model
          info = model_for(nil).info
          { name: model_name, model: model_name, size: File.size(info[:path]), digest: ollama_digest(info[:path]),
            details: ollama_details(info) }
        end

        # The GGUF file's sha256, computed once (Ollama's digests are sha256 too).
        def ollama_digest(path)
          @ollama_digest ||= Digest::SHA256.file(path).hexdigest
        end

        def ollama_modified_at
          File.mtime(model_for(nil).info[:path]).utc.iso8601(9)
        end

        def ollama_details(info)
          { parent_model: "", format: "gguf", family: info[:architecture], families: [info[:architecture]],
            parameter_size: info[:size_label].to_s, quantization_level: info[:file_type].to_s }
        end

        def ollama_template(model)
          @template || model.chat_template.to_s
        end

        def ollama_model_info(model)
          info = model.info
          arch = info[:architecture]
          tokenizer = model.tokenizer
          { "general.architecture" => arch, "general.name" => info[:name], "general.size_label" => info[:size_label],
            **HYPER_PARAMETERS.to_h { |key, name| ["#{arch}.#{key}", info[name]] },
            "tokenizer.ggml.model" => tokenizer.model, "tokenizer.ggml.pre" => tokenizer.pre,
            "tokenizer.ggml.bos_token_id" => tokenizer.bos, "tokenizer.ggml.eos_token_id" => tokenizer.eos }.compact
        end

        def ollama_capabilities(model)
          return ["embedding"] if model.info[:kind] == :encoder

          fim = model.tokenizer.fim_tokens.values_at(:prefix, :suffix, :middle).all?
          ["completion", *("tools" if ollama_template(model).include?("tools")), *("insert" if fim)]
        end
      end
    end
  end
end
