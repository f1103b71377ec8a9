// Errors the server answers with, shaped like OpenAI's: {"error": {message, type, param, code}} and an
// HTTP status. Anything else thrown while handling a request becomes a 500 with the same shape.

// OpenAI uses "invalid_request_error" for every 4xx, bad keys and unknown URLs included.
export type ApiErrorType = "invalid_request_error" | "server_error";

export interface ApiErrorBody {
  error: { message: string; type: ApiErrorType; param: string | null; code: string | null };
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: ApiErrorType,
    readonly code: string | null = null,
    readonly param: string | null = null,
    /** Extra response headers (Retry-After, Allow, WWW-Authenticate). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  get body(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  /** The error as the server reports it: ApiErrors as they are, anything else as a 500. */
  static from(e: unknown): ApiError {
    if (e instanceof ApiError) return e;
    const message = e instanceof Error ? e.message : String(e);
    return new ApiError(500, `internal error: ${message}`, "server_error", "internal_error");
  }
}

/** 400: a field is missing, of the wrong type or out of range (`param` names it). */
export function invalidParam(param: string, message: string, code = "invalid_value"): ApiError {
  return new ApiError(400, message, "invalid_request_error", code, param);
}

/** 400 about the request as a whole (its body, its encoding). */
export function badRequest(message: string, code: string): ApiError {
  return new ApiError(400, message, "invalid_request_error", code);
}

/** 404: the request names a model this server does not serve. */
export function modelNotFound(asked: string, served: string): ApiError {
  return new ApiError(404, `the model '${asked}' does not exist; this server serves '${served}'`, "invalid_request_error", "model_not_found", "model");
}
