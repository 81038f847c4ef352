//! The edit step's state over its standard streams: how the Docker sandbox hands the step its
//! state folder and takes its result back without a volume or an archive call (over `copy`, with
//! the runner image this executable made; see `docs/sandbox.md`).
//!
//! The runner writes the regular files directly in the state folder to the step's stdin as one
//! tar ([`send`]), each streamed from disk. The step ([`receive`]) parses the input file as it
//! arrives, writes every other file (the scripted model's answers) into its own state folder (its
//! tmpfs), and writes its result as JSON to stdout ([`write_result`]); the sandbox puts those bytes
//! into the host's state folder under [`super::STATE_OUTPUT`]. Both ends are here, so the framing
//! is written once.

use std::io::{self, Read, Write};
use std::path::{Component, Path};

use tokio::io::{AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Largest file other than the input the step takes (the scripted model's answers are far smaller).
pub const OTHER_FILE_LIMIT: u64 = 64 << 20;

/// Largest input the step parses (the state file's own bound).
pub const INPUT_LIMIT: u64 = 1 << 30;

/// Largest result the runner takes from the step's stdout (as from its state file).
pub const RESULT_LIMIT: u64 = 256 << 20;

/// How much of a file is read at a time when it is sent: `tokio::io::copy`'s 8 KiB would cost a
/// blocking-pool round trip and a socket write per 8 KiB (the input is the whole prompt).
const COPY_CHUNK: usize = 1 << 20;

/// Copies `reader` (a file, read on the blocking pool) to `writer` in reads of 1 MiB;
/// returns the bytes copied. What sends a file to a job's stdin goes through here.
pub async fn copy_in_chunks<R, W>(reader: R, writer: &mut W) -> io::Result<u64>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut chunks = tokio::io::BufReader::with_capacity(COPY_CHUNK, reader);
    tokio::io::copy_buf(&mut chunks, writer).await
}

/// Writes the regular files directly in `dir` (sorted by name; links, folders and names that are
/// not UTF-8 are left out) as one tar to `writer`, each file streamed from disk, then closes
/// `writer` so the step sees the end of its stdin.
pub async fn send<W: AsyncWrite + Unpin>(dir: &Path, mut writer: W) -> io::Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let file = bork_ci_core::safe_fs::open_no_follow(&dir.join(&name))?;
        let size = file.metadata()?.len();
        let mut header = tar::Header::new_gnu();
        header.set_path(&name)?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o600);
        header.set_size(size);
        header.set_mtime(0);
        header.set_cksum();
        writer.write_all(header.as_bytes()).await?;
        let sent = copy_in_chunks(tokio::fs::File::from_std(file).take(size), &mut writer).await?;
        if sent != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name} shrank while it was sent"),
            ));
        }
        let padding = (512 - size % 512) % 512;
        writer.write_all(&[0; 512][..padding as usize]).await?;
    }
    // The end of the archive: two empty blocks.
    writer.write_all(&[0; 1024]).await?;
    writer.flush().await?;
    writer.shutdown().await
}

/// The step's side: reads the tar [`send`] wrote from `reader`, parses the file `input` as JSON
/// as it arrives, writes every other file into `dir` (created if missing; at most
/// [`OTHER_FILE_LIMIT`] bytes each) and returns the input. An entry that is not a regular file
/// with a plain name is an `InvalidData` error, as is an archive without the input.
pub fn receive<T: serde::de::DeserializeOwned>(reader: impl Read, dir: &Path, input: &str) -> io::Result<T> {
    let mut archive = tar::Archive::new(reader);
    let mut parsed = None;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let mut components = path.components();
        let name = match (components.next(), components.next()) {
            (Some(Component::Normal(name)), None) => name.to_string_lossy().into_owned(),
            _ => return Err(invalid(format!("{} is not a plain file name", path.display()))),
        };
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(invalid(format!("{name} is not a regular file")));
        }
        if name == input {
            if entry.size() > INPUT_LIMIT {
                return Err(invalid(format!("{name} is larger than {INPUT_LIMIT} bytes")));
            }
            let buffered = io::BufReader::with_capacity(1 << 20, &mut entry);
            parsed = Some(serde_json::from_reader(buffered).map_err(io::Error::from)?);
            continue;
        }
        if entry.size() > OTHER_FILE_LIMIT {
            return Err(invalid(format!("{name} is larger than {OTHER_FILE_LIMIT} bytes")));
        }
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        std::fs::create_dir_all(dir)?;
        bork_ci_core::safe_fs::write_atomic(&dir.join(&name), &bytes)?;
    }
    parsed.ok_or_else(|| invalid(format!("no {input} came on stdin")))
}

/// The step's side: writes `result` as JSON to `writer` (its stdout), flushed.
pub fn write_result<T: serde::Serialize>(writer: impl Write, result: &T) -> io::Result<()> {
    let mut writer = io::BufWriter::with_capacity(1 << 20, writer);
    serde_json::to_writer(&mut writer, result).map_err(io::Error::from)?;
    writer.flush()
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Input {
        text: String,
    }

    /// Writes `input.json` holding `text` into the host's state folder `dir`.
    fn write_input(dir: &Path, text: &str) {
        let input = Input {
            text: text.to_owned(),
        };
        bork_ci_core::safe_fs::write_atomic(&dir.join("input.json"), &serde_json::to_vec(&input).unwrap())
            .unwrap();
    }

    #[tokio::test]
    async fn the_state_goes_through_as_sent_and_other_files_land_in_the_folder() {
        let host = tempfile::tempdir().unwrap();
        // Sizes around the tar block, so the padding is exercised, and past a read chunk.
        for size in [0usize, 1, 511, 512, 513, 70_000, 3 * COPY_CHUNK + 7] {
            let text = "x".repeat(size);
            write_input(host.path(), &text);
            bork_ci_core::safe_fs::write_atomic(&host.path().join("script.json"), &vec![b'7'; size]).unwrap();
            std::os::unix::fs::symlink("/etc/passwd", host.path().join("link")).ok();
            let mut wire = Vec::new();
            send(host.path(), &mut wire).await.unwrap();
            let step = tempfile::tempdir().unwrap();
            let folder = step.path().join("state");
            let input: Input = receive(wire.as_slice(), &folder, "input.json").unwrap();
            assert_eq!(input, Input { text });
            assert_eq!(
                bork_ci_core::safe_fs::read_regular(&folder.join("script.json"), OTHER_FILE_LIMIT).unwrap(),
                vec![b'7'; size]
            );
            assert!(!folder.join("link").exists(), "a link is not sent");
            assert!(
                !folder.join("input.json").exists(),
                "the input is parsed, not written"
            );
        }
    }

    /// A writer that keeps what it is given and counts the writes.
    #[derive(Default)]
    struct Counting {
        bytes: Vec<u8>,
        writes: usize,
    }

    impl tokio::io::AsyncWrite for Counting {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            self.writes += 1;
            self.bytes.extend_from_slice(buf);
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_large_input_goes_in_reads_of_a_chunk_not_of_8_kib() {
        let host = tempfile::tempdir().unwrap();
        let text = "y".repeat(8 * COPY_CHUNK);
        write_input(host.path(), &text);
        let mut wire = Counting::default();
        send(host.path(), &mut wire).await.unwrap();
        // 8 MiB in 8 KiB pieces would be over a thousand writes (each one a socket write to the
        // engine, and a blocking-pool round trip to read it).
        assert!(wire.writes <= 16, "{} writes", wire.writes);
        let step = tempfile::tempdir().unwrap();
        let input: Input = receive(wire.bytes.as_slice(), &step.path().join("state"), "input.json").unwrap();
        assert_eq!(input, Input { text });
    }

    #[test]
    fn a_hostile_stream_is_refused() {
        let step = tempfile::tempdir().unwrap();
        let dir = step.path().join("state");
        // Nothing at all, and an archive without the input.
        assert!(receive::<Input>(&[0u8; 1024][..], &dir, "input.json").is_err());
        // A path that climbs out.
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_entry_type(tar::EntryType::Regular);
        // `set_path` refuses `..`: write the name into the header's bytes as an attacker would.
        header.as_old_mut().name[..9].copy_from_slice(b"../escape");
        header.set_cksum();
        builder.append(&header, &b"x"[..]).unwrap();
        let wire = builder.into_inner().unwrap();
        let error = receive::<Input>(wire.as_slice(), &dir, "input.json").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        assert!(!step.path().join("escape").exists());
        // A link entry.
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder
            .append_link(&mut header, "input.json", "/etc/passwd")
            .unwrap();
        let wire = builder.into_inner().unwrap();
        assert!(receive::<Input>(wire.as_slice(), &dir, "input.json").is_err());
        // Input that is not JSON.
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(3);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, "input.json", &b"{x}"[..])
            .unwrap();
        let wire = builder.into_inner().unwrap();
        assert!(receive::<Input>(wire.as_slice(), &dir, "input.json").is_err());
    }
}
