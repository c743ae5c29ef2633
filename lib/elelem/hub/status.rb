# frozen_string_literal: true

module Elelem
  module Hub
    # The Hub's error answers, read as huggingface_hub reads them (`hf_raise_for_status`):
    # by the `X-Error-Code` header first, then by the status.
    module Status
      # What the Hub's `X-Error-Message` says when the token itself is refused.
      INVALID_TOKEN = "Invalid credentials in Authorization header"

      module_function

      # Raises the error an unsuccessful response stands for.
      # @param response [Net::HTTPResponse]
      # @param url [URI::HTTP] what was asked
      # @param repo [String]
      # @param file [String, nil] the file asked for, if any
      # @param token [Boolean] whether a token was sent
      # @return [void]
      # @raise [Elelem::HubNotFoundError, Elelem::HubAuthError, Elelem::HubError]
      def raise_for(response, url, repo:, file:, token:)
        code = response["x-error-code"]
        message = response["x-error-message"]
        case [code, response.code]
        in ["GatedRepo", _] then raise HubAuthError, gated(repo, url, token)
        in [_, "401"] if message == INVALID_TOKEN
          raise HubAuthError, "#{url.host} refused HF_TOKEN (#{message}); set it to a valid token or unset it"
        in ["RepoNotFound", _] | [nil, "401"] then raise HubNotFoundError, missing_repo(repo, url, token)
        in ["RevisionNotFound", _] then raise HubNotFoundError, "#{repo}: no such revision (#{url})"
        in ["EntryNotFound", _] | [nil, "404"] if file then raise HubNotFoundError, "#{repo} has no file #{file}"
        in [_, "403"] then raise HubAuthError, "#{url}: 403 Forbidden#{" (#{message})" if message}"
        else raise HubError, "#{url}: #{response.code} #{response.message}#{" (#{message})" if message}"
        end
      end

      def gated(repo, url, token)
        page = "#{url.scheme}://#{url.host}#{":#{url.port}" unless [80, 443].include?(url.port)}/#{repo}"
        "#{repo} is a gated repository: accept its conditions at #{page}, then set HF_TOKEN to a token of " \
          "that account (#{token ? "the token sent has no access to it" : "no HF_TOKEN is set"})"
      end

      def missing_repo(repo, url, token)
        "#{repo}: no such repository on #{url.host} (a private one reads the same" \
          "#{token ? ": the token sent cannot see it" : "; set HF_TOKEN if it is yours"})"
      end
      private_class_method :gated, :missing_repo
    end
  end
end
