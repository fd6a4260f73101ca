use std::io::Result as IoResult;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::util::bounds::{ConnectionSlot, StreamDeadlines};

use crate::connection::Connection;
#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use crate::ssl::SslStream;

pub(crate) enum Stream {
    Http(Connection),
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    Https(SslStream),
}

impl Stream {
    /// mcp-taskd patch: upstream's `Clone` unwrapped `try_clone`, so running out of
    /// descriptors (EMFILE) panicked the accept thread and the listener died.
    fn try_clone(&self) -> IoResult<Self> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.try_clone().map(Stream::Http),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => Ok(Stream::Https(ssl_stream.clone())),
        }
    }

    /// mcp-taskd patch: the socket timeout for the next read or write.
    fn set_timeout(&self, read: bool, timeout: Duration) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.set_timeout(read, timeout),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => Ok(()),
        }
    }
}

impl From<Connection> for Stream {
    fn from(tcp_stream: Connection) -> Self {
        Stream::Http(tcp_stream)
    }
}

impl Stream {
    fn secure(&self) -> bool {
        match self {
            Stream::Http(_) => false,
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => true,
        }
    }

    fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.peer_addr(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.peer_addr(),
        }
    }

    fn shutdown(&mut self, how: Shutdown) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.shutdown(how),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.shutdown(how),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.read(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.write(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.write(buf),
        }
    }

    fn flush(&mut self) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.flush(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.flush(),
        }
    }
}

pub struct RefinedTcpStream {
    stream: Stream,
    close_read: bool,
    close_write: bool,
    // mcp-taskd patch: overall deadlines shared by both halves, the socket timeout used
    // when none is set, and the connection's place in the server's count.
    deadlines: Arc<StreamDeadlines>,
    default_timeout: Duration,
    armed: Option<Duration>,
    _slot: Arc<ConnectionSlot>,
}

impl RefinedTcpStream {
    pub(crate) fn new<S>(
        stream: S,
        deadlines: Arc<StreamDeadlines>,
        idle_timeout: Duration,
        slot: Arc<ConnectionSlot>,
    ) -> IoResult<(RefinedTcpStream, RefinedTcpStream)>
    where
        S: Into<Stream>,
    {
        let stream: Stream = stream.into();

        let (read, write) = (stream.try_clone()?, stream);

        let read = RefinedTcpStream {
            stream: read,
            close_read: true,
            close_write: false,
            deadlines: Arc::clone(&deadlines),
            default_timeout: idle_timeout,
            armed: None,
            _slot: Arc::clone(&slot),
        };

        let write = RefinedTcpStream {
            stream: write,
            close_read: false,
            close_write: true,
            deadlines,
            default_timeout: crate::SOCKET_TIMEOUT,
            armed: None,
            _slot: slot,
        };

        Ok((read, write))
    }

    /// mcp-taskd patch: the two halves of a plain connection whose descriptor was
    /// already duplicated (so that a failed duplication can still be answered).
    pub(crate) fn from_halves(
        read: Connection,
        write: Connection,
        deadlines: Arc<StreamDeadlines>,
        idle_timeout: Duration,
        slot: Arc<ConnectionSlot>,
    ) -> (RefinedTcpStream, RefinedTcpStream) {
        let read = RefinedTcpStream {
            stream: Stream::Http(read),
            close_read: true,
            close_write: false,
            deadlines: Arc::clone(&deadlines),
            default_timeout: idle_timeout,
            armed: None,
            _slot: Arc::clone(&slot),
        };
        let write = RefinedTcpStream {
            stream: Stream::Http(write),
            close_read: false,
            close_write: true,
            deadlines,
            default_timeout: crate::SOCKET_TIMEOUT,
            armed: None,
            _slot: slot,
        };
        (read, write)
    }

    /// mcp-taskd patch: the timeout for one socket operation — what is left of the
    /// overall deadline if one is set, else the default.
    /// Without a deadline the default is set once, not before every operation.
    fn arm(&mut self, read: bool) -> IoResult<()> {
        let remaining = if read {
            self.deadlines.read_remaining()
        } else {
            self.deadlines.write_remaining()
        };
        let timeout = match remaining {
            Some(left) => left?.min(self.default_timeout),
            None if self.armed == Some(self.default_timeout) => return Ok(()),
            None => self.default_timeout,
        };
        self.stream.set_timeout(read, timeout)?;
        self.armed = Some(timeout);
        Ok(())
    }

    /// Returns true if this struct wraps around a secure connection.
    #[inline]
    pub(crate) fn secure(&self) -> bool {
        self.stream.secure()
    }

    pub(crate) fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        self.stream.peer_addr()
    }

    /// mcp-taskd patch: see `Connection::raw_fd`.
    #[cfg(unix)]
    pub(crate) fn raw_fd(&self) -> Option<std::os::unix::io::RawFd> {
        match &self.stream {
            Stream::Http(connection) => Some(connection.raw_fd()),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => None,
        }
    }
}

impl Drop for RefinedTcpStream {
    fn drop(&mut self) {
        if self.close_read {
            self.stream.shutdown(Shutdown::Read).ok();
        }

        if self.close_write {
            self.stream.shutdown(Shutdown::Write).ok();
        }
    }
}

// mcp-taskd patch 14: a signal handled by some thread of the process can land on a
// connection thread blocked in a socket call with a timeout, which then fails with
// `EINTR` (such calls are never restarted), and the callers above treat every error
// as the end of the connection. Nothing was transferred: try again, with what is left
// of the deadline.
impl Read for RefinedTcpStream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        loop {
            self.arm(true)?;
            match self.stream.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
}

impl Write for RefinedTcpStream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        loop {
            self.arm(false)?;
            match self.stream.write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> IoResult<()> {
        self.stream.flush()
    }
}
