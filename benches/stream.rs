//! Streaming benchmark: reads one answer of 1 MB (an edit answer: JSON with whole file
//! contents) the two ways a server sends it, side by side in one run: whole (one
//! `application/json` body) and streamed as server-sent events, as OpenAI (one
//! `chat.completion.chunk` per token) and Anthropic (one `content_block_delta` per token) stream
//! it, fed to the reader in 16 KiB network reads. Everything goes through `llm::read_answer`, the
//! code `Provider::complete` runs on a response. A last row frames the OpenAI stream's events
//! without reading their JSON (`llm::sse::Parser` alone), the floor of any streaming reader.
//!
//! Rounds are interleaved (every row once per round); it prints the median of the rounds, the
//! answer's MB/s (1 MB of answer text over the time), the wire's MB/s, and each row's ratio to
//! the whole-body read of the same vendor. Run: `cargo bench --bench stream`.
//! `BORK_BENCH_ANSWER_BYTES` sets the answer size (default 1048576), `BORK_BENCH_TOKEN_BYTES`
//! the bytes per streamed token (default 4, about what the vendors' tokenizers average on code),
//! `BORK_BENCH_ROUNDS` the rounds (default 7).
#![expect(
    clippy::disallowed_methods,
    reason = "benchmarks read their settings directly"
)]
#![expect(clippy::unwrap_used, reason = "a benchmark aborts on any setup failure")]
#![expect(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::time::{Duration, Instant};

use bork_ci::llm::{self, ProviderKind};
use serde_json::json;

/// What a network read hands the reader at a time.
const READ_BYTES: usize = 16 * 1024;

fn main() {
    let answer_bytes = env_number("BORK_BENCH_ANSWER_BYTES", 1 << 20);
    let token_bytes = env_number("BORK_BENCH_TOKEN_BYTES", 4).max(1);
    let rounds = env_number("BORK_BENCH_ROUNDS", 7).max(1);
    let answer = edit_answer(answer_bytes);
    let tokens = pieces(&answer, token_bytes);

    let openai_whole = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer, "refusal": null}, "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": tokens.len(), "total_tokens": 1000 + tokens.len()}
    })
    .to_string()
    .into_bytes();
    let openai_stream = openai_events(&tokens);
    let anthropic_whole = json!({
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": answer}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 1000, "output_tokens": tokens.len()}
    })
    .to_string()
    .into_bytes();
    let anthropic_stream = anthropic_events(&tokens);

    let rows: Vec<Row> = vec![
        Row::new("openai, whole body (baseline)", &openai_whole, |body| {
            read(ProviderKind::Openai, body, false)
        }),
        Row::new("openai, streamed (SSE chunks)", &openai_stream, |body| {
            read(ProviderKind::Openai, body, true)
        }),
        Row::new(
            "anthropic, whole body (baseline)",
            &anthropic_whole,
            move |body| read(ProviderKind::Anthropic, body, false),
        ),
        Row::new(
            "anthropic, streamed (SSE events)",
            &anthropic_stream,
            move |body| read(ProviderKind::Anthropic, body, true),
        ),
        Row::new(
            "floor: SSE framing only (openai stream)",
            &openai_stream,
            |body| {
                let mut parser = llm::sse::Parser::new();
                let mut data = 0usize;
                for chunk in body.chunks(READ_BYTES) {
                    parser
                        .push(chunk, &mut |event: llm::sse::Event| data += event.data.len())
                        .unwrap();
                }
                data
            },
        ),
    ];

    // Every reader must give the answer back exactly before anything is timed.
    for (kind, body, streamed) in [
        (ProviderKind::Openai, &openai_whole, false),
        (ProviderKind::Openai, &openai_stream, true),
        (ProviderKind::Anthropic, &anthropic_whole, false),
        (ProviderKind::Anthropic, &anthropic_stream, true),
    ] {
        let completion = llm::read_answer(kind, "m", body.chunks(READ_BYTES), streamed, None).unwrap();
        assert_eq!(completion.text, answer, "{kind} streamed: {streamed}");
        assert_eq!(completion.usage.output_tokens, tokens.len() as u64);
    }

    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); rows.len()];
    for _ in 0..rounds {
        for (index, row) in rows.iter().enumerate() {
            let started = Instant::now();
            let out = (row.run)(&row.body);
            times[index].push(started.elapsed());
            std::hint::black_box(out);
        }
    }

    let mb = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
    println!(
        "answer: {:.2} MB of text, {} tokens of {token_bytes} bytes; {rounds} rounds, median; reads of {} KiB",
        mb(answer.len()),
        tokens.len(),
        READ_BYTES / 1024
    );
    println!(
        "{:<42} {:>10} {:>14} {:>10} {:>12} {:>14}",
        "reader", "median ms", "answer MB/s", "wire MB", "wire MB/s", "vs whole body"
    );
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|samples| {
            samples.sort();
            samples[samples.len() / 2]
        })
        .collect();
    for (index, row) in rows.iter().enumerate() {
        let seconds = medians[index].as_secs_f64();
        let baseline = if row.name.starts_with("anthropic") {
            medians[2]
        } else {
            medians[0]
        };
        println!(
            "{:<42} {:>10.1} {:>14.1} {:>10.1} {:>12.1} {:>13.1}x",
            row.name,
            seconds * 1000.0,
            mb(answer.len()) / seconds,
            mb(row.body.len()),
            mb(row.body.len()) / seconds,
            seconds / baseline.as_secs_f64()
        );
    }
}

/// One reader timed on one body.
struct Row {
    name: &'static str,
    body: Vec<u8>,
    run: fn(&[u8]) -> usize,
}

impl Row {
    fn new(name: &'static str, body: &[u8], run: fn(&[u8]) -> usize) -> Self {
        Self {
            name,
            body: body.to_vec(),
            run,
        }
    }
}

fn read(kind: ProviderKind, body: &[u8], streamed: bool) -> usize {
    llm::read_answer(kind, "m", body.chunks(READ_BYTES), streamed, None)
        .unwrap()
        .text
        .len()
}

/// An edit answer of about `bytes` bytes: files of Rust-like source with quotes, backslashes and
/// newlines, so the JSON has escapes to undo.
fn edit_answer(bytes: usize) -> String {
    let mut files = serde_json::Map::new();
    let mut total = 0;
    let mut file = 0;
    while total < bytes {
        let mut contents = String::new();
        for line in 0..200 {
            contents.push_str(&format!(
                "    let value_{line} = format!(\"{{}} \\\\ {{}}\", \"item {file}.{line}\", {line}); // ü\n"
            ));
        }
        total += contents.len() + 40;
        files.insert(format!("src/module_{file}.rs"), json!(contents));
        file += 1;
    }
    json!({"create-or-update": files, "delete": []}).to_string()
}

/// `text` in pieces of about `size` bytes, cut at character boundaries.
fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(size);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        out.push(piece);
        rest = tail;
    }
    out
}

fn openai_events(tokens: &[&str]) -> Vec<u8> {
    let prefix = r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":{"content":"#;
    let suffix = "},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
    let mut out = String::new();
    out.push_str(r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#);
    out.push_str("\n\n");
    for token in tokens {
        out.push_str(prefix);
        out.push_str(&serde_json::to_string(token).unwrap());
        out.push_str(suffix);
    }
    out.push_str(r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
    out.push_str("\n\n");
    out.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": tokens.len(), "total_tokens": 1000 + tokens.len()}})
    ));
    out.into_bytes()
}

fn anthropic_events(tokens: &[&str]) -> Vec<u8> {
    let mut out = String::new();
    let event = |out: &mut String, name: &str, data: &str| {
        out.push_str("event: ");
        out.push_str(name);
        out.push_str("\ndata: ");
        out.push_str(data);
        out.push_str("\n\n");
    };
    event(
        &mut out,
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 1000, "output_tokens": 1}}}).to_string(),
    );
    event(
        &mut out,
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    for token in tokens {
        let data = format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}}"#,
            serde_json::to_string(token).unwrap()
        );
        event(&mut out, "content_block_delta", &data);
    }
    event(
        &mut out,
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    event(
        &mut out,
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": tokens.len()}}).to_string(),
    );
    event(&mut out, "message_stop", r#"{"type":"message_stop"}"#);
    out.into_bytes()
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
