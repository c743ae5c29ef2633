# frozen_string_literal: true

require_relative "responses_request"
require_relative "responses_reply"

module Elelem
  class Server
    # OpenAI's Responses API, `POST /v1/responses` (and `/responses`), as llama-server has it: the
    # request made into a chat completion ({ResponsesRequest}), generated as the chat endpoint
    # generates ({Generation}), and answered in the Responses API's shapes ({ResponsesReply}),
    # streamed as its server-sent events when asked. Responses are not stored
    # (`previous_response_id` is refused): a client sends the whole conversation each time.
    # Errors are OpenAI's error objects, naming the Responses API's fields.
    module Responses
      # What each path answers, and to which methods.
      ROUTES = { "/v1/responses" => [%w[POST], :responses], "/responses" => [%w[POST], :responses] }.freeze

      private

      def responses(env)
        body = read_json(env)
        model = model_for(body.is_a?(Hash) ? body["model"] : nil)
        generation = renaming_fields do
          chat = ResponsesRequest.new(body).chat_body
          request = Request.new(chat, :chat, max_tokens: @max_tokens, reuse_prefix: @reuse_prefix,
                                             n_vocab: model.info[:n_vocab])
          new_generation(model, request)
        end
        respond(env, generation, ResponsesReply.new(generation, model, served_name), ResponsesStream)
      end

      # The chat request's refusals, naming the Responses API's fields.
      def renaming_fields
        yield
      rescue HTTPError => e
        raise ResponsesRequest.renamed(e)
      end
    end
  end
end
