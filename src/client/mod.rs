//! The OpenAI-compatible Chat Completions client.
//!
//! One call is: POST `{base}/chat/completions` with `stream: true`, read
//! the SSE body ([`sse`]), assemble chunks into a response ([`assemble`]),
//! and hand text pieces to the caller as they arrive. Transient failures
//! before anything was shown (connection errors, 429, 5xx) are retried with
//! backoff; everything else becomes an [`ApiError`] whose message names
//! what happened and what to do. The API key never appears in an error.
//!
//! Nothing the server sends can hold the agent without bound: one response
//! is capped in bytes ([`bounds`]), the timers between data count only
//! events that grow the answer (keep-alive comments and empty chunks do
//! not), a JSON body is read under the same timers, and the whole request,
//! retries included, has a deadline ([`REQUEST_TIMEOUT`]).

pub mod assemble;
pub mod bounds;
pub mod options;
pub mod repetition;
pub mod sse;
pub mod tls;
pub mod wire;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use assemble::{ModelResponse, Piece};
pub use bounds::{
    Limits, OversizedCall, argument_too_large, cut_note, repetition_note, repetition_notice,
};
pub use options::{RequestCtx, RequestOptions};
pub use wire::Request;

use assemble::{Assembler, ChunkError};
use sse::{SseEvent, SseParser};

/// Time allowed to open a connection. Loopback and real APIs answer in
/// well under a second; ten covers a slow network without hanging.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time allowed between sending the request and the first data that grows
/// the answer. Reasoning models may think silently for minutes before the
/// first token.
pub const FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(300);

/// Time allowed between two chunks that grow the answer once it has
/// started. Keep-alive comments and empty chunks do not reset it, so a
/// server that only says it is alive times out like a silent one.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Time one request may take in all, retries and their waits included. An
/// answer that keeps trickling in (each piece inside the idle timeout)
/// still ends; half an hour is far past any real answer, even a slow local
/// model's.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Attempts per request for transient failures (connection refused, 429,
/// 5xx), counting the first.
pub const MAX_ATTEMPTS: u32 = 4;

/// First retry delay; doubled on each attempt, with jitter.
pub const RETRY_BASE_DELAY: Duration = Duration::from_millis(1000);

/// Longest wait between attempts, whatever `Retry-After` says.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// Bytes of an error body kept for the message.
const ERROR_BODY_LIMIT: usize = 4000;

/// Where and how to reach the model.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Base URL up to and including the version path, e.g.
    /// `https://api.deepseek.com/v1`.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub connect_timeout: Duration,
    pub first_token_timeout: Duration,
    pub idle_timeout: Duration,
    /// See [`REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    pub max_attempts: u32,
    pub retry_base_delay: Duration,
    /// Caps on one response.
    pub limits: Limits,
}

impl ClientConfig {
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: api_key.filter(|k| !k.is_empty()),
            connect_timeout: CONNECT_TIMEOUT,
            first_token_timeout: FIRST_TOKEN_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            max_attempts: MAX_ATTEMPTS,
            retry_base_delay: RETRY_BASE_DELAY,
            limits: Limits::default(),
        }
    }

    fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

/// Why a model call failed. Every message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The server answered with a non-2xx status.
    #[error("the model API answered {status}: {message}{}", status_hint(*status))]
    Status { status: u16, message: String },
    /// No connection could be made, or it broke before an answer.
    #[error(
        "could not reach the model API at {url}: {reason}. Check AGENT_BASE_URL and that the server is running."
    )]
    Connect { url: String, reason: String },
    /// The server's TLS certificate was refused: asking again would meet
    /// the same certificate, so it is not retried.
    #[error(
        "the TLS certificate of {url} was refused: {reason}. If the server's certificate comes from a private authority, set SSL_CERT_FILE to that authority's certificate (PEM)."
    )]
    Certificate { url: String, reason: String },
    /// The stream broke or carried something unusable.
    #[error("the model's stream failed: {0}")]
    Stream(String),
    /// The server went silent for longer than allowed.
    #[error("the model API stalled: {0}")]
    Stalled(String),
    /// The response passed `max_response_bytes` and was cut there.
    #[error(
        "the model's response passed {}, the most one response may hold (max_response_bytes), and was cut off there; the text shown so far is kept in the conversation. A real answer is far smaller, so the server is misbehaving or the model is repeating itself: ask for a shorter answer, or raise max_response_bytes in the client map of models.rhai",
        bounds::format_bytes(*cap)
    )]
    ResponseTooLarge { cap: usize },
    /// An SSE line (or event) longer than the reader accepts.
    #[error(
        "the model's stream carried a line over {}, more than the reader accepts, so the event on it was lost and the request failed. Real chunks are a few KB, so the server is misbehaving; if it sends whole answers in one line, raise max_response_bytes in the client map of models.rhai (the line limit is twice it)",
        bounds::format_bytes(*cap)
    )]
    LineTooLong { cap: usize },
    /// The whole request, retries included, took longer than allowed.
    #[error(
        "the model request ran past its time limit of {} (request_timeout, retries included) and was stopped; the text shown so far is kept in the conversation. Try again, or raise request_timeout in the client map of models.rhai if the model needs longer",
        format_delay(*limit)
    )]
    TimedOut { limit: Duration },
    /// The base URL could not be used.
    #[error("invalid base URL {0:?}: it should look like https://api.example.com/v1")]
    BadUrl(String),
    /// The person interrupted the request.
    #[error("cancelled")]
    Cancelled,
}

impl ApiError {
    /// Whether another attempt may succeed.
    fn is_transient(&self) -> bool {
        match self {
            ApiError::Status { status, .. } => *status == 429 || *status >= 500,
            // A broken or stalled stream is retried as a whole request.
            ApiError::Connect { .. }
            | ApiError::Stream(_)
            | ApiError::Stalled(_)
            | ApiError::LineTooLong { .. } => true,
            // Asking again would stream the same endless answer, or run
            // past the deadline that just passed.
            ApiError::ResponseTooLarge { .. } | ApiError::TimedOut { .. } => false,
            ApiError::Certificate { .. } => false,
            ApiError::BadUrl(_) | ApiError::Cancelled => false,
        }
    }
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => ". Check AGENT_API_KEY: it is missing, wrong, or lacks access to this model.",
        404 => {
            ". Check AGENT_BASE_URL (it usually ends in /v1) and the model name (AGENT_MODEL or --model)."
        }
        429 => ". The server is rate limiting; wait a moment and try again.",
        400 => ". The server rejected the request; the message above says which part.",
        s if s >= 500 => ". The server failed; try again shortly.",
        _ => "",
    }
}

/// A notice from the client for the person (e.g. a retry).
pub type NoticeFn<'a> = &'a mut (dyn FnMut(String) + Send);

/// Anything that answers chat requests: the HTTP client, or the scripted
/// model of `agent demo`.
pub trait Model: Send + Sync {
    /// The model id sent in requests.
    fn name(&self) -> &str;

    /// Answers one request body, streaming text to `on_piece`.
    fn respond<'a>(
        &'a self,
        body: &'a Request<'a>,
        on_piece: &'a mut (dyn FnMut(Piece) + Send),
        on_notice: NoticeFn<'a>,
        cancel: &'a CancellationToken,
    ) -> futures_util::future::BoxFuture<'a, Result<ModelResponse, ApiError>>;
}

impl Model for ChatClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    fn respond<'a>(
        &'a self,
        body: &'a Request<'a>,
        on_piece: &'a mut (dyn FnMut(Piece) + Send),
        on_notice: NoticeFn<'a>,
        cancel: &'a CancellationToken,
    ) -> futures_util::future::BoxFuture<'a, Result<ModelResponse, ApiError>> {
        Box::pin(self.complete(body, on_piece, on_notice, cancel))
    }
}

/// The chat client. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ChatClient {
    http: reqwest::Client,
    config: ClientConfig,
}

impl ChatClient {
    pub fn new(config: ClientConfig) -> Result<Self, ApiError> {
        if reqwest::Url::parse(&config.endpoint()).is_err() {
            return Err(ApiError::BadUrl(config.base_url.clone()));
        }
        let connect = |reason: String| ApiError::Connect {
            url: config.base_url.clone(),
            reason,
        };
        let http = tls::builder()
            .map_err(connect)?
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| connect(e.to_string()))?;
        Ok(ChatClient { http, config })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Sends one request body (a [`Request`], or any JSON) and streams the
    /// answer. `on_piece` sees text as it arrives; `on_notice` sees retry
    /// notices.
    pub async fn complete<B: serde::Serialize + Sync + ?Sized>(
        &self,
        body: &B,
        on_piece: &mut (dyn FnMut(Piece) + Send),
        on_notice: NoticeFn<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ApiError> {
        let limit = self.config.request_timeout;
        let deadline = Instant::now() + limit;
        let mut attempt = 1;
        loop {
            let result = tokio::select! {
                r = self.attempt(body, on_piece) => r,
                () = cancel.cancelled() => Err(Attempt::fail(ApiError::Cancelled)),
                () = tokio::time::sleep_until(deadline) => Err(Attempt::fail(ApiError::TimedOut { limit })),
            };
            match result {
                Ok(response) => return Ok(response),
                Err(Attempt::Failed {
                    error,
                    retry_after,
                    shown,
                }) => {
                    let error = self.redact(error);
                    if !error.is_transient() || attempt >= self.config.max_attempts {
                        return Err(error);
                    }
                    let delay = retry_after
                        .unwrap_or_else(|| backoff(self.config.retry_base_delay, attempt));
                    // Text already shown is not kept: the retry answers again
                    // from the start, and the history only gets the answer
                    // that completed.
                    let discarded = if shown {
                        "; the partial answer above is discarded"
                    } else {
                        ""
                    };
                    on_notice(format!(
                        "{}; retrying in {} ({}/{}){discarded}",
                        short_reason(&error),
                        format_delay(delay),
                        attempt + 1,
                        self.config.max_attempts
                    ));
                    if shown {
                        on_piece(Piece::Restart);
                    }
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = cancel.cancelled() => return Err(ApiError::Cancelled),
                        () = tokio::time::sleep_until(deadline) => return Err(ApiError::TimedOut { limit }),
                    }
                    attempt += 1;
                }
            }
        }
    }

    async fn attempt<B: serde::Serialize + Sync + ?Sized>(
        &self,
        body: &B,
        on_piece: &mut (dyn FnMut(Piece) + Send),
    ) -> Result<ModelResponse, Attempt> {
        let url = self.config.endpoint();
        let mut request = self.http.post(&url).json(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        // The first token is due this long after sending, headers included.
        let first_deadline = Instant::now() + self.config.first_token_timeout;
        let response = tokio::time::timeout_at(first_deadline, request.send())
            .await
            .map_err(|_| {
                Attempt::fail(ApiError::Stalled(format!(
                    "no response within {} of sending the request (first_token_timeout in models.rhai)",
                    format_delay(self.config.first_token_timeout)
                )))
            })?
            .map_err(|e| {
                let (url, reason) = (self.config.base_url.clone(), describe_reqwest(&e));
                Attempt::fail(if refused_certificate(&e) {
                    ApiError::Certificate { url, reason }
                } else {
                    ApiError::Connect { url, reason }
                })
            })?;

        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after(v, chrono::Utc::now()));
            let text = self.error_body(response, first_deadline).await;
            return Err(Attempt::Failed {
                error: ApiError::Status {
                    status: status.as_u16(),
                    message: error_body_message(&text),
                },
                retry_after,
                shown: false,
            });
        }

        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/json"));
        if is_json {
            return self.whole_answer(response, first_deadline, on_piece).await;
        }

        let mut stream = response.bytes_stream();
        let mut decoder = StreamDecoder::with_limits(self.config.limits);
        let mut shown = false;
        // Only data that grows the answer moves the deadline on.
        let mut deadline = first_deadline;
        let mut progress = decoder.progress();
        loop {
            let next = match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(next) => next,
                // The answer is complete and only `[DONE]` is missing.
                Err(_) if decoder.finished() => break,
                Err(_) => {
                    let what = if decoder.started() {
                        format!(
                            "no data for {} in the middle of the answer (idle_timeout in models.rhai; keep-alives do not count)",
                            format_delay(self.config.idle_timeout)
                        )
                    } else {
                        format!(
                            "no first token within {} (first_token_timeout in models.rhai; keep-alives do not count)",
                            format_delay(self.config.first_token_timeout)
                        )
                    };
                    return Err(Attempt::Failed {
                        error: ApiError::Stalled(what),
                        retry_after: None,
                        shown,
                    });
                }
            };
            let Some(chunk) = next else { break };
            let bytes = chunk.map_err(|e| Attempt::Failed {
                error: ApiError::Stream(format!("the connection broke: {}", describe_reqwest(&e))),
                retry_after: None,
                shown,
            })?;
            let pieces = decoder.feed(&bytes).map_err(|error| Attempt::Failed {
                error,
                retry_after: None,
                shown,
            })?;
            for piece in pieces {
                shown = true;
                on_piece(piece);
            }
            if decoder.cut() {
                // Dropping the stream closes the connection: nothing more
                // is read.
                return Err(Attempt::Failed {
                    error: ApiError::ResponseTooLarge {
                        cap: self.config.limits.max_response_bytes,
                    },
                    retry_after: None,
                    shown,
                });
            }
            // An answer that stopped saying anything ends here; dropping
            // the stream closes the connection.
            if decoder.repetition_cut() {
                break;
            }
            if decoder.progress() != progress {
                progress = decoder.progress();
                deadline = Instant::now() + self.config.idle_timeout;
            }
            if decoder.done() {
                break;
            }
        }
        let (pieces, response) = decoder.finish().map_err(|error| Attempt::Failed {
            error,
            retry_after: None,
            shown,
        })?;
        for piece in pieces {
            on_piece(piece);
        }
        Ok(response)
    }

    /// Reads a non-streamed (`application/json`) answer under the same
    /// bounds as a stream: the first bytes by `first_deadline`, then no gap
    /// longer than the idle timeout, and no more than the line cap.
    async fn whole_answer(
        &self,
        response: reqwest::Response,
        first_deadline: Instant,
        on_piece: &mut (dyn FnMut(Piece) + Send),
    ) -> Result<ModelResponse, Attempt> {
        let limits = self.config.limits;
        let too_large = || {
            Attempt::fail(ApiError::ResponseTooLarge {
                cap: limits.max_response_bytes,
            })
        };
        let body = read_body(
            response,
            first_deadline,
            self.config.idle_timeout,
            limits.line_cap(),
        )
        .await
        .map_err(|e| match e {
            BodyError::Stalled { started: false } => Attempt::fail(ApiError::Stalled(format!(
                "the JSON answer did not arrive within {} of sending the request (first_token_timeout in models.rhai)",
                format_delay(self.config.first_token_timeout)
            ))),
            BodyError::Stalled { started: true } => Attempt::fail(ApiError::Stalled(format!(
                "the JSON answer stopped arriving: no data for {} (idle_timeout in models.rhai)",
                format_delay(self.config.idle_timeout)
            ))),
            BodyError::TooLarge(_) => too_large(),
            BodyError::Broken(reason) => Attempt::fail(ApiError::Stream(format!(
                "the connection broke: {reason}"
            ))),
        })?;
        let text = String::from_utf8_lossy(&body);
        let mut assembler = Assembler::with_limits(limits);
        let pieces = assembler
            .push(&text)
            .map_err(|e| Attempt::fail(chunk_error(e)))?;
        let shown = !pieces.is_empty();
        for piece in pieces {
            on_piece(piece);
        }
        if assembler.cut() {
            return Err(Attempt::Failed {
                error: ApiError::ResponseTooLarge {
                    cap: limits.max_response_bytes,
                },
                retry_after: None,
                shown,
            });
        }
        Ok(assembler.finish())
    }

    /// An error status's body, for the message: only what arrives in time
    /// and fits in [`ERROR_BODY_READ_LIMIT`].
    async fn error_body(&self, response: reqwest::Response, first_deadline: Instant) -> String {
        match read_body(
            response,
            first_deadline,
            self.config.idle_timeout,
            ERROR_BODY_READ_LIMIT,
        )
        .await
        {
            Ok(body) | Err(BodyError::TooLarge(body)) => {
                String::from_utf8_lossy(&body).into_owned()
            }
            Err(_) => String::new(),
        }
    }

    /// Removes the API key from any text that could reach a person or a log.
    fn redact(&self, error: ApiError) -> ApiError {
        let Some(key) = self.config.api_key.as_deref().filter(|k| k.len() >= 4) else {
            return error;
        };
        let scrub = |s: String| s.replace(key, "[redacted]");
        match error {
            ApiError::Status { status, message } => ApiError::Status {
                status,
                message: scrub(message),
            },
            ApiError::Connect { url, reason } => ApiError::Connect {
                url: scrub(url),
                reason: scrub(reason),
            },
            ApiError::Certificate { url, reason } => ApiError::Certificate {
                url: scrub(url),
                reason: scrub(reason),
            },
            ApiError::Stream(s) => ApiError::Stream(scrub(s)),
            ApiError::Stalled(s) => ApiError::Stalled(scrub(s)),
            ApiError::BadUrl(s) => ApiError::BadUrl(scrub(s)),
            e @ (ApiError::ResponseTooLarge { .. }
            | ApiError::LineTooLong { .. }
            | ApiError::TimedOut { .. }
            | ApiError::Cancelled) => e,
        }
    }
}

/// SSE framing plus chunk assembly: raw body bytes in, text pieces and
/// finally a [`ModelResponse`] out, held to [`Limits`]. Pure, so it can be
/// tested at every split point of a recorded stream.
#[derive(Debug)]
pub struct StreamDecoder {
    parser: SseParser,
    assembler: Assembler,
    events: Vec<SseEvent>,
    saw_done: bool,
    line_cap: usize,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::with_limits(Limits::default())
    }
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder held to `limits` (lines to [`Limits::line_cap`]).
    pub fn with_limits(limits: Limits) -> Self {
        StreamDecoder {
            parser: SseParser::with_max_line(limits.line_cap()),
            assembler: Assembler::with_limits(limits),
            events: Vec::new(),
            saw_done: false,
            line_cap: limits.line_cap(),
        }
    }

    /// Whether any data that grows the answer has arrived.
    pub fn started(&self) -> bool {
        self.assembler.progress() > 0
    }

    /// Grows with the answer; empty chunks and comments leave it alone.
    pub fn progress(&self) -> usize {
        self.assembler.progress()
    }

    /// Whether the server has given a `finish_reason`.
    pub fn finished(&self) -> bool {
        self.assembler.finished()
    }

    /// Whether the answer passed `max_response_bytes` and was cut: the
    /// pieces returned so far are all there is, and [`Self::finish`] fails.
    pub fn cut(&self) -> bool {
        self.assembler.cut()
    }

    /// Whether the answer was cut because it stopped saying anything
    /// ([`repetition`]): nothing more needs to be read.
    pub fn repetition_cut(&self) -> bool {
        self.assembler.repetition_cut()
    }

    /// Whether `data: [DONE]` has arrived.
    pub fn done(&self) -> bool {
        self.saw_done
    }

    /// Feeds body bytes; returns the text pieces they complete. A line
    /// over the line cap is an error: its event (and any tool call in it)
    /// cannot be read, so the answer would be silently incomplete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Piece>, ApiError> {
        self.parser.feed(bytes, &mut self.events);
        if self.parser.overflowed() {
            return Err(ApiError::LineTooLong { cap: self.line_cap });
        }
        self.drain()
    }

    fn drain(&mut self) -> Result<Vec<Piece>, ApiError> {
        let mut pieces = Vec::new();
        for event in std::mem::take(&mut self.events) {
            let data = event.data.trim();
            if data == "[DONE]" {
                self.saw_done = true;
            } else if !data.is_empty() && !self.saw_done {
                pieces.extend(self.assembler.push(data).map_err(chunk_error)?);
            }
        }
        Ok(pieces)
    }

    /// Ends the body. A stream that stopped before `[DONE]` and before any
    /// `finish_reason` was cut short, and is an error; so is one cut at
    /// the response cap.
    pub fn finish(mut self) -> Result<(Vec<Piece>, ModelResponse), ApiError> {
        self.parser.finish(&mut self.events);
        if self.parser.overflowed() {
            return Err(ApiError::LineTooLong { cap: self.line_cap });
        }
        let pieces = self.drain()?;
        if self.assembler.cut() {
            return Err(ApiError::ResponseTooLarge {
                cap: self.assembler.limits().max_response_bytes,
            });
        }
        if !self.saw_done && !self.assembler.finished() {
            return Err(ApiError::Stream(STREAM_CUT_SHORT.into()));
        }
        Ok((pieces, self.assembler.finish()))
    }
}

/// The message for a stream that ended before the answer was complete.
pub const STREAM_CUT_SHORT: &str =
    "the stream ended before the answer was complete (no finish_reason and no [DONE])";

/// A failed attempt, with what the retry logic needs to know.
enum Attempt {
    Failed {
        error: ApiError,
        retry_after: Option<Duration>,
        /// Text was already shown, so a retry would duplicate it.
        shown: bool,
    },
}

impl Attempt {
    fn fail(error: ApiError) -> Self {
        Attempt::Failed {
            error,
            retry_after: None,
            shown: false,
        }
    }
}

/// Bytes of an error status's body read at most (the message keeps
/// [`ERROR_BODY_LIMIT`] of them).
const ERROR_BODY_READ_LIMIT: usize = 64 << 10;

/// Why a whole body could not be read.
enum BodyError {
    /// No data by the deadline; `started` says whether any had come.
    Stalled { started: bool },
    /// More than the limit arrived; the first `limit` bytes.
    TooLarge(Vec<u8>),
    /// The connection broke.
    Broken(String),
}

/// Reads a whole body: the first bytes by `first_deadline`, then no gap
/// longer than `idle`, and at most `limit` bytes.
async fn read_body(
    response: reqwest::Response,
    first_deadline: Instant,
    idle: Duration,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    let mut stream = response.bytes_stream();
    let mut body = Vec::new();
    let mut deadline = first_deadline;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => {
                return Err(BodyError::Stalled {
                    started: !body.is_empty(),
                });
            }
            Ok(None) => return Ok(body),
            Ok(Some(Err(e))) => return Err(BodyError::Broken(describe_reqwest(&e))),
            Ok(Some(Ok(bytes))) => {
                if body.len() + bytes.len() > limit {
                    body.extend_from_slice(&bytes[..limit - body.len()]);
                    return Err(BodyError::TooLarge(body));
                }
                body.extend_from_slice(&bytes);
                deadline = Instant::now() + idle;
            }
        }
    }
}

fn chunk_error(e: ChunkError) -> ApiError {
    ApiError::Stream(e.to_string())
}

/// The server's own message from an error body: `error.message` when the
/// body is OpenAI-shaped JSON, otherwise the text itself, shortened.
fn error_body_message(body: &str) -> String {
    let parsed = serde_json::from_str::<Value>(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| {
            v.get("error")
                .map(assemble::error_message)
                .or_else(|| v.get("message").and_then(Value::as_str).map(str::to_string))
        })
        .unwrap_or_else(|| body.trim().to_string());
    let message = if message.is_empty() {
        "(empty body)".to_string()
    } else {
        message
    };
    if message.len() > ERROR_BODY_LIMIT {
        format!("{}…", crate::text::prefix(&message, ERROR_BODY_LIMIT))
    } else {
        message
    }
}

fn describe_reqwest(e: &reqwest::Error) -> String {
    // The source chain holds the useful part ("Connection refused").
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether a request failed because the server's certificate was refused.
/// rustls's error sits in reqwest's source chain, wrapped in `io::Error`s
/// (whose `source` skips what they wrap, so each is opened by hand).
fn refused_certificate(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let mut inner: &(dyn std::error::Error + 'static) = s;
        while let Some(io) = inner.downcast_ref::<std::io::Error>() {
            match io.get_ref() {
                Some(wrapped) => inner = wrapped,
                None => break,
            }
        }
        if matches!(
            inner.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidCertificate(_))
        ) {
            return true;
        }
        source = s.source();
    }
    false
}

fn short_reason(error: &ApiError) -> String {
    match error {
        ApiError::Status { status: 429, .. } => "rate limited".to_string(),
        ApiError::Status { status, .. } => format!("server error {status}"),
        ApiError::Connect { .. } => "could not connect".to_string(),
        ApiError::Stalled(_) => "the stream stalled".to_string(),
        ApiError::Stream(_) => "the stream broke".to_string(),
        ApiError::LineTooLong { cap } => format!(
            "the stream broke: the server sent a line over {}, which cannot be read",
            bounds::format_bytes(*cap)
        ),
        other => other.to_string(),
    }
}

/// A `Retry-After` value: seconds, or an HTTP date (RFC 7231), as a delay
/// from `now`, capped at [`MAX_RETRY_DELAY`].
fn retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::from_secs_f64(secs).min(MAX_RETRY_DELAY));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = (at.with_timezone(&chrono::Utc) - now)
        .to_std()
        .unwrap_or(Duration::ZERO);
    Some(wait.min(MAX_RETRY_DELAY))
}

/// Exponential backoff with ±25% jitter, capped at [`MAX_RETRY_DELAY`].
fn backoff(base: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1 << (attempt - 1).min(16));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let jitter = 0.75 + f64::from(nanos % 1000) / 2000.0;
    exp.mul_f64(jitter).min(MAX_RETRY_DELAY)
}

fn format_delay(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{} s", d.as_secs_f64().round())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_yield_the_server_message() {
        assert_eq!(
            error_body_message(r#"{"error":{"message":"Model not found","type":"x"}}"#),
            "Model not found"
        );
        assert_eq!(error_body_message("plain failure\n"), "plain failure");
        assert_eq!(error_body_message(""), "(empty body)");
    }

    #[test]
    fn status_errors_carry_hints() {
        let e = ApiError::Status {
            status: 401,
            message: "bad key".into(),
        };
        let text = e.to_string();
        assert!(
            text.contains("401") && text.contains("bad key") && text.contains("AGENT_API_KEY"),
            "{text}"
        );
        let e = ApiError::Status {
            status: 404,
            message: "nope".into(),
        };
        assert!(e.to_string().contains("AGENT_BASE_URL"));
    }

    #[test]
    fn bound_errors_say_what_to_raise_and_only_broken_lines_are_retried() {
        let cases = [
            (
                ApiError::ResponseTooLarge { cap: 4 << 20 },
                "max_response_bytes",
                false,
            ),
            (
                ApiError::LineTooLong { cap: 8 << 20 },
                "max_response_bytes",
                true,
            ),
            (
                ApiError::TimedOut {
                    limit: REQUEST_TIMEOUT,
                },
                "request_timeout",
                false,
            ),
        ];
        for (error, setting, transient) in cases {
            let text = error.to_string();
            assert!(
                text.contains(setting) && text.contains("models.rhai"),
                "{text}"
            );
            assert_eq!(error.is_transient(), transient, "{text}");
        }
        assert!(
            ApiError::ResponseTooLarge { cap: 4 << 20 }
                .to_string()
                .contains("passed 4 MB")
        );
        assert!(
            ApiError::TimedOut {
                limit: REQUEST_TIMEOUT
            }
            .to_string()
            .contains("1800 s")
        );
    }

    #[test]
    fn keys_are_redacted() {
        let client = ChatClient::new(ClientConfig::new(
            "http://127.0.0.1:1/v1",
            "m",
            Some("sk-secret-123".into()),
        ))
        .unwrap();
        let e = client.redact(ApiError::Status {
            status: 401,
            message: "key sk-secret-123 is invalid".into(),
        });
        assert!(!e.to_string().contains("sk-secret-123"));
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = chrono::DateTime::parse_from_rfc2822("Wed, 02 Dec 2026 12:00:00 GMT")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(" 0.5 ", now), Some(Duration::from_millis(500)));
        assert_eq!(
            retry_after("Wed, 02 Dec 2026 12:00:05 GMT", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            retry_after("Wed, 02 Dec 2026 11:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("9999", now), Some(MAX_RETRY_DELAY));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-3", now), None);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        assert!(backoff(base, 1) <= Duration::from_millis(125));
        assert!(backoff(base, 3) >= Duration::from_millis(300));
        assert_eq!(backoff(Duration::from_secs(30), 10), MAX_RETRY_DELAY);
    }
}
