# frozen_string_literal: true

require "digest"

module Elelem
  class Server
    module Ollama
      # Ollama's listings of the served models: `GET /api/tags` (the models there are, loaded
      # or not), `POST /api/show` (one model's details, template and GGUF hyper-parameters;
      # it loads the model), `GET /api/ps` (the models loaded, with their memory and expiry)
      # and `GET /api/version`.
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
          models = @pool.models.map { |model| ollama_model(model).merge(modified_at: modified_at(model[:path])) }
          json(200, { models: })
        end

        # The model's details, its chat template, its GGUF hyper-parameters (`model_info`) and
        # what it can do (`capabilities`: `completion`, `tools`, `insert`, or `embedding`).
        # `model` names it (Ollama's older clients: `name`).
        def ollama_show(env)
          body = retrieval_body(env)
          model = model_for(body["model"] || body["name"])
          json(200, { modelfile: "FROM #{model.info[:path]}\n", parameters: "", template: ollama_template(model),
                      details: ollama_details(model.info), model_info: ollama_model_info(model),
                      capabilities: ollama_capabilities(model),
                      modified_at: modified_at(model.info[:path]) })
        end

        # The models loaded: the memory each took ({ModelPool.footprint}: weights, KV cache
        # and compute buffer) and, once idle, when it will be unloaded (a model that is never
        # unloaded has no `expires_at`).
        def ollama_ps(_env)
          loaded = @pool.models.select { |model| model[:status] == :loaded }.map do |model|
            info = model[:info]
            expires = model[:expires_at]
            ollama_model(model).merge(size: model[:bytes], **(info[:backend] == "CPU" ? { size_vram: 0 } : {}),
                                      context_length: info[:n_ctx],
                                      **(expires ? { expires_at: expires.utc.iso8601(9) } : {}))
          end
          json(200, { models: loaded })
        end

        def ollama_version(_env)
          json(200, { version: VERSION })
        end

        # A model of the pool as Ollama lists it ({ModelPool#models}).
        def ollama_model(model)
          path = model[:path]
          { name: model[:name], model: model[:name], size: File.size(path), digest: ollama_digest(path),
            details: ollama_details(model[:info]) }
        end

        # The GGUF file's sha256, computed once per file (Ollama's digests are sha256 too).
        def ollama_digest(path)
          (@ollama_digests ||= {})[path] ||= Digest::SHA256.file(path).hexdigest
        end

        def modified_at(path)
          File.mtime(path).utc.iso8601(9)
        end

        # The details {Model#info} gives, blank for a model not opened yet.
        def ollama_details(info)
          info ||= {}
          { parent_model: "", format: "gguf", family: info[:architecture].to_s, families: [*info[:architecture]],
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
