//! mcp-taskd patch: the decoder of `Transfer-Encoding: chunked` request bodies.
//!
//! `chunked_transfer::Decoder` (upstream's) refuses a trailer section after the last
//! chunk, which RFC 9112 §7.1 allows: the first trailer byte was consumed as the end of
//! the body, and the rest was read as the next request on the connection. This one
//! accepts chunk extensions and a trailer section (both discarded), each within a bound,
//! and fails on anything else.

use std::convert::TryFrom;
use std::io::{Error, ErrorKind, Read, Result};

/// Longest chunk-size line, extensions included.
const MAX_SIZE_LINE: usize = 4 * 1024;
/// Longest trailer section.
const MAX_TRAILER: usize = 8 * 1024;

enum State {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk, with this many bytes left.
    Data(u64),
    /// After a chunk's data, before its CRLF.
    DataEnd,
    /// After the trailer section: the body has ended.
    Done,
}

pub struct ChunkedDecoder<R> {
    source: R,
    state: State,
}

fn malformed(why: &str) -> Error {
    Error::new(ErrorKind::InvalidInput, format!("malformed chunked body: {why}"))
}

impl<R: Read> ChunkedDecoder<R> {
    pub fn new(source: R) -> ChunkedDecoder<R> {
        ChunkedDecoder {
            source,
            state: State::Size,
        }
    }

    fn byte(&mut self) -> Result<u8> {
        let mut byte = [0u8];
        loop {
            match self.source.read(&mut byte) {
                Ok(0) => return Err(malformed("truncated")),
                Ok(_) => return Ok(byte[0]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// One line ending in CRLF, without it; at most `limit` bytes before the CRLF.
    fn line(&mut self, limit: usize) -> Result<Vec<u8>> {
        let mut line = Vec::new();
        loop {
            match self.byte()? {
                b'\r' => {
                    return match self.byte()? {
                        b'\n' => Ok(line),
                        _ => Err(malformed("CR without LF")),
                    }
                }
                _ if line.len() >= limit => return Err(malformed("line too long")),
                byte => line.push(byte),
            }
        }
    }

    fn chunk_size(&mut self) -> Result<u64> {
        let line = self.line(MAX_SIZE_LINE)?;
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size)
            .map_err(|_| malformed("chunk size"))?
            .trim_matches([' ', '\t']);
        if size.is_empty() || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed("chunk size"));
        }
        u64::from_str_radix(size, 16).map_err(|_| malformed("chunk size"))
    }

    fn skip_trailer(&mut self) -> Result<()> {
        let mut left = MAX_TRAILER;
        loop {
            let line = self.line(left)?;
            if line.is_empty() {
                return Ok(());
            }
            left = left.saturating_sub(line.len() + 2);
        }
    }
}

impl<R: Read> Read for ChunkedDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        loop {
            match self.state {
                State::Done => return Ok(0),
                State::Size => match self.chunk_size()? {
                    0 => {
                        self.skip_trailer()?;
                        self.state = State::Done;
                    }
                    size => self.state = State::Data(size),
                },
                State::DataEnd => {
                    self.line(0)?;
                    self.state = State::Size;
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(0);
                    }
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let read = self.source.read(&mut buf[..want])?;
                    if read == 0 {
                        return Err(malformed("truncated"));
                    }
                    let left = left - read as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(read);
                }
            }
        }
    }
}
