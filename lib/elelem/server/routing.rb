# frozen_string_literal: true

require "uri"
require_relative "model_pool"

module Elelem
  class Server
    # Which model answers a request, out of the server's {ModelPool}: the one its body's
    # `model` names (a GET route's `?model=NAME`, as llama-server's router reads it; none: the
    # first model; with one model, any name reaches it). A request leases its model from the
    # first time a route asks for it ({#model_for}) to the end of its reply, a stream's
    # included, so the pool never closes a model a request uses.
    #
    # And the routes that list the models: OpenAI's `GET /v1/models` and `GET /v1/models/NAME`
    # (each with llama-server's router's `status`), and llama-server's router's own
    # `GET /models`, `POST /models/load` and `POST /models/unload`.
    module Routing
      # OpenAI's routes that list the models.
      ROUTES = { "/v1/models" => [%w[GET HEAD], :models] }.freeze
      # llama-server's router's routes (its `--models-dir` mode), with its error shape.
      ROUTER_ROUTES = {
        "/models" => [%w[GET HEAD], :models], "/models/load" => [%w[POST], :load_model],
        "/models/unload" => [%w[POST], :unload_model]
      }.freeze
      # Where a request's {Call} is kept while its thread answers it.
      CALL = :elelem_server_call

      # What one request holds while it is answered: its route's handler, Rack's env, and
      # its lease on the model it uses.
      Call = Struct.new(:handler, :env, :lease)

      private

      # Answers a request (the block) with a {Call} of its own: the lease it takes is
      # released once the reply is made, or, for a stream, once the stream closes
      # ({#hand_over_lease}).
      def within_call(env, handler)
        call = Thread.current[CALL] = Call.new(handler, env, nil)
        yield
      ensure
        Thread.current[CALL] = nil
        call&.lease&.release
      end

      # The model the request names, leased for the rest of the request; a request uses one
      # model, so a later call gives the one leased first whatever it names.
      # @param keep_alive [Numeric, nil] Ollama's `keep_alive`, in seconds
      def model_for(name, keep_alive: nil)
        call = Thread.current[CALL]
        call.lease ||= pool_answer { @pool.acquire(name, keep_alive:) }
        check_serves(call.handler, call.lease.model)
        call.lease.model
      rescue Elelem::LoadError => e
        log(call.env, e)
        raise HTTPError.new(500, "model '#{@pool.resolve(name)}' could not be loaded (the server's log says why)",
                            code: "model_load_failed")
      end

      # A 501 for a text route on an embedding model.
      def check_serves(handler, model)
        return unless Retrieval::GENERATING.include?(handler) && model.info[:kind] == :encoder

        raise HTTPError.new(501, "#{served_name} is an embedding model: it serves /v1/embeddings, /v1/rerank " \
                                 "and /api/embed",
                            code: "not_supported")
      end

      # The model the request leased ({#model_for} first).
      def served_model
        Thread.current[CALL].lease.model
      end

      # ... and its name, as replies give it.
      def served_name
        Thread.current[CALL].lease.name
      end

      # The lease, now the stream's to release when it closes.
      def hand_over_lease
        call = Thread.current[CALL]
        call.lease.tap { call.lease = nil }
      end

      # The pool's refusals as a client's errors, in every API's shape.
      def pool_answer
        yield
      rescue ModelPool::UnknownModelError => e
        raise HTTPError.new(404, e.message, param: "model", code: "model_not_found")
      rescue ModelPool::NoRoomError => e
        raise HTTPError.new(503, e.message, code: "insufficient_memory", headers: { "retry-after" => "1" })
      rescue ArgumentError => e
        raise HTTPError.new(400, e.message, param: "model")
      end

      # A GET route's `?model=NAME`.
      def query_model(env)
        URI.decode_www_form(env["QUERY_STRING"].to_s).assoc("model")&.last
      rescue ArgumentError
        raise HTTPError.new(400, "the query string is not well-formed")
      end

      def models(_env)
        json(200, { object: "list", data: @pool.models.map { |model| model_object(model) } })
      end

      def model(env)
        name = env["PATH_INFO"].to_s.chomp("/").delete_prefix("/v1/models/")
        model = @pool.models.find { |m| m[:name] == name }
        raise HTTPError.new(404, "model '#{name}' not found", param: "model", code: "model_not_found") unless model

        json(200, model_object(model))
      end

      # OpenAI's model object, and whether the model is loaded as llama-server's router says it.
      def model_object(model)
        { id: model[:name], object: "model", created: @created, owned_by: "elelem",
          status: { value: model[:status].to_s } }
      end

      # Loads `model` now (it stays for the pool's keep-alive), as llama-server's router does.
      def load_model(env)
        name = router_model(env)
        if @pool.models.find { |m| m[:name] == name }&.fetch(:status) == :loaded
          raise HTTPError.new(400, "model is already running")
        end

        model_for(name)
        json(200, { success: true })
      end

      # Unloads `model` now, or once the requests using it end (a model the application
      # opened and handed to the server stays).
      def unload_model(env)
        name = router_model(env)
        return json(200, { success: true }) if @pool.unload(name)

        raise HTTPError.new(400, "model was opened by the application and stays loaded") if @pool.kept?(name)

        raise HTTPError.new(400, "model is not running")
      end

      # The name a router route's body gives, resolved.
      def router_model(env)
        name = retrieval_body(env)["model"]
        raise HTTPError.new(400, "model is required", param: "model") if name.nil? || name == ""

        pool_answer { @pool.resolve(name) }
      end
    end
  end
end
