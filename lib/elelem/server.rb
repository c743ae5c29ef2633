# frozen_string_literal: true

require "json"
require "openssl"
require_relative "server/http_error"
require_relative "server/fields"
require_relative "server/request"
require_relative "server/image_fetch"
require_relative "server/generation"
require_relative "server/reply"
require_relative "server/event_stream"
require_relative "server/runner"
require_relative "server/retrieval"
require_relative "server/routing"
require_relative "server/llama_endpoints"
require_relative "server/ollama"
require_relative "server/responses"

module Elelem
  # OpenAI's HTTP API over a {Model}, or several ({ModelPool}), as a Rack application: a plain callable taking
  # Rack's env and returning `[status, headers, body]`, so it needs no gem and runs on any
  # Rack server (`elelem serve` runs it on Puma) or inside an app:
  #
  #   # config/routes.rb
  #   mount Elelem::Server.new(Elelem.open("qwen2.5-coder-0.5b", parallel: 4)) => "/llm"
  #
  # Routes (under the mount point, `SCRIPT_NAME`): `POST /v1/chat/completions`,
  # `POST /v1/completions`, `POST /v1/responses` ({Responses}; all three streaming as
  # server-sent events when asked),
  # `POST /v1/embeddings`, `POST /v1/rerank` (llama-server's shape; see {Retrieval}),
  # `GET /v1/models`, `GET /v1/models/NAME`, `GET /health`; llama-server's own endpoints
  # ({LlamaEndpoints}: `/completion`, `/infill`, `/tokenize`, `/metrics`, ...) and Ollama's API
  # ({Ollama}: `/api/chat`, `/api/generate`, ...), each with its error shape. Concurrent requests run
  # together in the model's passes (`parallel:` of {Elelem.open}); past those and the
  # model's `queue:`, a request is answered 503 at once. With several models, each request
  # goes to the one its `model` names ({Routing}), opened on first use.
  #
  # Errors are OpenAI's error objects: 400 (malformed JSON, a field of the wrong type or
  # out of range, a prompt longer than the context, a rerank on a model without a
  # classification head), 401 (an API key is set and the request's Bearer token is not
  # it), 404, 405, 413 (a body over `max_body_bytes`), 501 (text asked of an embedding
  # model), 503 (busy), 500 (anything unexpected, logged to `rack.errors`). With one model,
  # the `model` field of a request is not checked: it is served whatever a client names;
  # with several, an unknown name is a 404.
  class Server
    include Routing
    include Retrieval
    include LlamaEndpoints
    include Ollama
    include Responses

    # The largest request body taken unless told otherwise (a chat filling a 32k-token
    # context is about 130 KB).
    DEFAULT_MAX_BODY_BYTES = 4 << 20
    # The most tokens one request generates unless told otherwise; a request asking for
    # more gets this many (and `finish_reason: "length"`).
    DEFAULT_MAX_TOKENS = 4096
    # What each path answers, and to which methods.
    ROUTES = {
      "/v1/chat/completions" => [%w[POST], :chat_completions], "/v1/completions" => [%w[POST], :completions],
      "/health" => [%w[GET HEAD], :health],
      "/v1/embeddings" => [%w[POST], :embeddings], "/v1/rerank" => [%w[POST], :rerank]
    }.merge(Routing::ROUTES, Routing::ROUTER_ROUTES, LlamaEndpoints::ROUTES, Ollama::ROUTES, Responses::ROUTES).freeze
    # The headers of a streaming reply: no cache or proxy may hold its events back.
    STREAM_HEADERS = { "content-type" => "text/event-stream", "cache-control" => "no-cache",
                       "x-accel-buffering" => "no" }.freeze

    # @param model [Model, ModelPool] the model to serve (the server does not close it), or
    #   the models, by name
    # @param model_name [String, nil] a model's name in replies (default: its file's name
    #   without `.gguf`); a pool names its own
    # @param api_key [String, nil] when set, every `/v1` request needs `Authorization: Bearer KEY`
    #   (`/health` never does, for load balancers)
    # @param max_body_bytes [Integer] the largest request body accepted (413 past it)
    # @param max_tokens [Integer] the most tokens a request generates, whatever it asks
    # @param template [String, nil] a Jinja chat template instead of the model's
    # @param reuse_prefix [Boolean] keep the cached prefix a request shares with an earlier
    #   one on the same sequence (llama-server's `cache_prompt`, on there too): multi-turn chats
    #   do not evaluate earlier turns again
    # @param allow_fetch [Boolean] fetch the `http(s)` URLs of `image_url` parts ({ImageFetch});
    #   off: only data URIs are taken, a URL is a 400
    def initialize(model, model_name: nil, api_key: nil, max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                   max_tokens: DEFAULT_MAX_TOKENS, template: nil, reuse_prefix: true, allow_fetch: false)
      @pool = pool_of(model, model_name)
      @api_key = api_key.nil? ? nil : Options.text(:api_key, api_key)
      @max_body_bytes = Options.integer(:max_body_bytes, max_body_bytes, 1..Options::MAX_U32)
      @max_tokens = Options.integer(:max_tokens, max_tokens, 0..Options::MAX_N_CTX)
      @template = template.nil? ? nil : Options.text(:template, template)
      @reuse_prefix = reuse_prefix ? true : false
      @allow_fetch = allow_fetch ? true : false
      @created = Time.now.to_i
      @streams = {}
      @streams_lock = Mutex.new
      @metrics = {}
      @metrics_lock = Mutex.new
    end

    # @return [String] the name of the model served (with several, the first: the one a
    #   request naming none gets)
    def model_name
      @pool.names.first
    end

    # Answers one request (Rack's interface).
    # @param env [Hash] Rack's environment
    # @return [Array(Integer, Hash, #each)] status, headers, body
    def call(env)
      status, headers, body = answer(env)
      # A HEAD gets the headers of a GET and no body.
      env["REQUEST_METHOD"] == "HEAD" ? [status, headers, []] : [status, headers, body]
    end

    # Ends every streaming reply in flight: each generation stops and its stream ends
    # with an error event (`shutting_down`). For a server that is stopping ({Runner} calls
    # it once the grace period is over), since a server waits for the streams it sends.
    # @return [Integer] how many streams were ended
    def close_streams
      streams = @streams_lock.synchronize { @streams.keys }
      streams.each(&:close).size
    end

    private

    def answer(env)
      handler = route(env)
      authorize(env) unless handler == :health
      within_call(env, handler) { send(handler, env) }
    rescue HTTPError => e
      error(e, env)
    rescue StandardError, NoMemoryError => e
      error(refusal(e) || unexpected(env, e), env)
    end

    def pool_of(model, name)
      case model
      when Model
        name = name ? Options.text(:model_name, name) : File.basename(model.info[:path], ".gguf")
        ModelPool.new({ name => model }, budget: nil, ttl: ModelPool::FOREVER)
      when ModelPool
        raise ArgumentError, "model_name names a single model; a ModelPool names its own" if name

        model
      else raise ArgumentError, "model must be an Elelem::Model or an Elelem::Server::ModelPool, got #{model.class}"
      end
    end

    def route(env)
      path = env["PATH_INFO"].to_s.chomp("/")
      methods, handler = ROUTES[path] || (path.start_with?("/v1/models/") && [%w[GET HEAD], :model])
      method = env["REQUEST_METHOD"]
      raise HTTPError.new(404, "no route for #{method} #{path}", code: "not_found") unless methods

      unless methods.include?(method)
        raise HTTPError.new(405, "#{path} takes #{methods.first}, not #{method}",
                            code: "method_not_allowed", headers: { "allow" => methods.join(", ") })
      end

      handler
    end

    def authorize(env)
      return if @api_key.nil?

      given = env["HTTP_AUTHORIZATION"].to_s[/\ABearer (.+)\z/, 1].to_s
      return if OpenSSL.secure_compare(given, @api_key)

      raise HTTPError.new(401, "a valid API key is required (Authorization: Bearer KEY)",
                          code: "invalid_api_key", headers: { "www-authenticate" => "Bearer" })
    end

    def health(_env)
      json(200, { status: "ok" })
    end

    def chat_completions(env)
      generate(env, :chat)
    end

    def completions(env)
      generate(env, :completion)
    end

    def generate(env, kind)
      body = read_json(env)
      model = model_for(body.is_a?(Hash) ? body["model"] : nil)
      request = Request.new(body, kind, max_tokens: @max_tokens, reuse_prefix: @reuse_prefix,
                                        n_vocab: model.info[:n_vocab])
      generation = new_generation(model, request)
      respond(env, generation, Reply.new(generation, model, served_name), EventStream)
    end

    # What a request generates on `model`, counted in the metrics; `prompt`: one its route
    # built, instead of the request's own.
    def new_generation(model, request, prompt: nil)
      Generation.new(model, request, @template, metrics: metrics_for(served_name), prompt:, allow_fetch: @allow_fetch)
    end

    # The counters of the model named `name` (each model has its own, as each of
    # llama-server's router's instances has).
    def metrics_for(name)
      @metrics_lock.synchronize { @metrics[name] ||= Metrics.new(@pool.parallel(name)) }
    end

    # The reply's whole object, or a stream of its pieces (`stream_class`: the API's framing),
    # for every route that generates.
    def respond(env, generation, reply, stream_class, headers: STREAM_HEADERS)
      return json(200, reply.complete(generation.run)) unless generation.request.stream

      lease = hand_over_lease
      forget = lambda do |stream|
        @streams_lock.synchronize { @streams.delete(stream) }
        lease.release
      end
      stream = stream_class.new(reply, socket: env["puma.socket"], logger: ->(e) { log(env, e) },
                                       on_close: forget) { |&each_event| generation.run(&each_event) }
      @streams_lock.synchronize { @streams[stream] = true }
      [200, headers.dup, stream.start]
    end

    # The body as JSON, read no further than one byte past the limit (a body announced
    # as larger is not read at all).
    def read_json(env)
      too_large = HTTPError.new(413, "the request body is larger than #{@max_body_bytes} bytes",
                                code: "request_too_large")
      raise too_large if env["CONTENT_LENGTH"].to_i > @max_body_bytes

      input = env["rack.input"]
      input.rewind if input.respond_to?(:rewind) # a middleware before us may have read it
      body = String.new(input&.read(@max_body_bytes + 1).to_s, encoding: Encoding::UTF_8)
      raise too_large if body.bytesize > @max_body_bytes
      raise HTTPError.new(400, "the request body is not UTF-8") unless body.valid_encoding?

      JSON.parse(body)
    rescue JSON::ParserError => e
      raise HTTPError.new(400, "the request body is not valid JSON: #{e.message[0, 200]}")
    end

    # The model's own refusals (every sequence busy and the queue full, a closed model), and
    # a stopping server's: Puma raises its ForceShutdown (where Puma is loaded at all) in a
    # request still running after the grace period.
    def refusal(error)
      case error
      when BusyError
        HTTPError.new(503, "the server is busy: #{error.message}; retry later",
                      code: "server_busy", headers: { "retry-after" => "1" })
      when ClosedError then HTTPError.new(503, "the model is closed", code: "model_closed")
      when ->(e) { defined?(::Puma::ThreadPool::ForceShutdown) && e.is_a?(::Puma::ThreadPool::ForceShutdown) }
        HTTPError.new(503, "the server is shutting down", code: "shutting_down")
      end
    end

    def unexpected(env, error)
      log(env, error)
      HTTPError.new(500, "internal error (#{error.class})")
    end

    def log(env, error)
      errors = env["rack.errors"] || $stderr
      errors.puts("elelem server: #{error.full_message(highlight: false)}")
      errors.flush if errors.respond_to?(:flush)
    end

    def error(http_error, env)
      status, headers, body = json(http_error.status, error_body(http_error, env["PATH_INFO"].to_s.chomp("/")))
      [status, headers.merge(http_error.headers), body]
    end

    def json(status, object)
      [status, { "content-type" => "application/json" }, [JSON.generate(object)]]
    end
  end
end
