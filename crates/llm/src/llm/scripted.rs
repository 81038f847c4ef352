//! The scripted model: canned answers from a file, no network, for the quick start and tests.
//!
//! The script is JSON `{"answers": [ ... ]}`. An answer that is a string is the raw answer text,
//! used as it is (so malformed answers can be scripted); any other value is serialized compactly
//! and that is the answer text. The answer given is number N where N is how many assistant turns
//! the conversation already holds, so the model is stateless: it works the same when each
//! iteration runs in a fresh process or container. The file is read on every call. Usage is an
//! estimate (bytes / 4) so reports show numbers. This is not a model and never claims to be one.

use std::path::PathBuf;

use serde_json::Value;

use super::data::{Completion, Conversation, FinishReason, LlmError, LlmSettings, Usage};

/// A script file larger than this is refused.
pub const MAX_SCRIPT_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug)]
pub(super) struct ScriptedProvider {
    path: PathBuf,
    /// The estimated usage of every answer given.
    spent: std::sync::Mutex<Usage>,
}

impl ScriptedProvider {
    pub(super) fn new(settings: &LlmSettings) -> Result<Self, LlmError> {
        let path = settings.script.clone().ok_or_else(|| LlmError::Script {
            path: "(none)".to_owned(),
            message: "the scripted provider needs a script file of canned answers (llm.script)".to_owned(),
        })?;
        Ok(Self {
            path,
            spent: std::sync::Mutex::new(Usage::default()),
        })
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "scripted model (canned answers from {}, not a real LLM)",
            self.path.display()
        )
    }

    fn error(&self, message: String) -> LlmError {
        LlmError::Script {
            path: self.path.display().to_string(),
            message,
        }
    }

    pub(super) fn complete(&self, conversation: &Conversation) -> Result<Completion, LlmError> {
        let answers = self.answers()?;
        let index = conversation.assistant_turns();
        let answer = answers.get(index).ok_or_else(|| {
            self.error(format!(
                "the script ran out: it has {} answer(s) and answer {} was asked for",
                answers.len(),
                index + 1
            ))
        })?;
        let text = match answer {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let input_bytes = conversation.system.len()
            + conversation.prefix.len()
            + conversation
                .turns
                .iter()
                .map(|turn| turn.text.len())
                .sum::<usize>();
        let usage = Usage {
            input_tokens: estimate_tokens(input_bytes),
            output_tokens: estimate_tokens(text.len()),
            cached_input_tokens: 0,
            estimated_answers: 0,
        };
        *self.spent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) += usage;
        Ok(Completion {
            usage,
            text,
            finish: FinishReason::Stop,
        })
    }

    pub(super) fn spent(&self) -> Usage {
        *self.spent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn answers(&self) -> Result<Vec<Value>, LlmError> {
        let bytes = bork_ci_core::safe_fs::read_regular(&self.path, MAX_SCRIPT_BYTES)
            .map_err(|error| self.error(format!("cannot read the script: {error}")))?;
        let script: Value = serde_json::from_slice(&bytes)
            .map_err(|error| self.error(format!("the script is not JSON: {error}")))?;
        match script {
            Value::Object(mut map) => match map.remove("answers") {
                Some(Value::Array(answers)) => Ok(answers),
                _ => Err(self.error("the script must be a JSON object with an `answers` array".to_owned())),
            },
            _ => Err(self.error("the script must be a JSON object with an `answers` array".to_owned())),
        }
    }
}

fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;
    use crate::llm::{ProviderKind, Turn};

    fn provider(script: &str) -> (tempfile::TempDir, ScriptedProvider) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("answers.json");
        std::fs::write(&path, script).expect("write script");
        let mut settings = LlmSettings::new(ProviderKind::Scripted, "canned");
        settings.script = Some(path);
        let provider = ScriptedProvider::new(&settings).expect("provider");
        (dir, provider)
    }

    #[test]
    fn answer_index_is_the_number_of_assistant_turns() {
        let (_dir, provider) =
            provider(r#"{"answers": ["not json {", {"create-or-update": {}, "delete": ["a"]}]}"#);
        let mut conversation = Conversation {
            system: "s".repeat(40),
            prefix: "p".repeat(40),
            turns: vec![],
        };
        let first = provider.complete(&conversation).expect("first");
        assert_eq!(first.text, "not json {");
        assert_eq!(first.usage.input_tokens, 20);
        conversation.turns.push(Turn::assistant(first.text));
        conversation.turns.push(Turn::user("parse error"));
        let second = provider.complete(&conversation).expect("second");
        assert_eq!(second.text, r#"{"create-or-update":{},"delete":["a"]}"#);
        conversation.turns.push(Turn::assistant(second.text));
        let error = provider.complete(&conversation).expect_err("ran out");
        assert!(error.to_string().contains("ran out"), "{error}");
    }

    #[test]
    fn a_script_without_answers_is_an_error() {
        let (_dir, provider) = provider(r#"{"replies": []}"#);
        let error = provider
            .complete(&Conversation::default())
            .expect_err("bad script");
        assert!(error.to_string().contains("`answers`"), "{error}");
    }
}
