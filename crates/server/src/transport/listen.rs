//! Writes a `subscriptions/listen` stream: the acknowledgement, then what the
//! subscription's mailbox brings, until the client goes away, the stream's lifetime or the
//! server ends it, or the client stops reading for too long.
//!
//! Two things are watched without costing a live, busy stream anything per frame beyond
//! one `ioctl`:
//! - a client that hung up is noticed within [`PROBE_PERIOD`] (the TCP state, see
//!   [`Peer`]), so its subscription slot is freed at once rather than at the next
//!   keep-alive;
//! - a client that stops reading makes frames pile up unsent in the socket. Past
//!   `queue_len` of them (or a quarter of the send buffer, so an answer always fits), the
//!   stream pauses (where the kernel cannot count them: once the socket has no room); the hub keeps coalescing its changes meanwhile, so a reader that
//!   catches up loses nothing. Paused for `max_stall_ms` without the client reading a
//!   byte, the stream ends with an error answer to the listen request, never in silence.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::error_body;
use super::peer::Peer;
use super::sse::SseWriter;
use crate::handlers::{Listen, Service};
use taskd_notifications::{Delivery, Frame};
use taskd_protocol::envelope::META_SUBSCRIPTION_ID;
use taskd_protocol::{code, RpcError};

/// How often an idle or paused stream asks whether its client is still there.
const PROBE_PERIOD: Duration = Duration::from_millis(250);

/// The stream's socket, and where its recent frames ended in the byte stream.
struct Outlet {
    sse: SseWriter,
    peer: Option<Peer>,
    /// End offsets of the last `queue_len + 1` frames written.
    frame_ends: VecDeque<u64>,
    queue_len: usize,
}

impl Outlet {
    fn send_frame(&mut self, message: &Value) -> io::Result<()> {
        self.sse.send(message)?;
        self.frame_ends.push_back(self.sse.bytes_written());
        if self.frame_ends.len() > self.queue_len + 1 {
            self.frame_ends.pop_front();
        }
        Ok(())
    }

    /// The bytes waiting unsent in the socket, when they are more frames than allowed
    /// (the client is not keeping up); `None` while it keeps up.
    ///
    /// Where the kernel cannot say how many bytes are unsent (see [`Peer`]), a socket
    /// with no room left stands for "too many", and everything written so far for the
    /// bytes: an upper bound, which stays put while the client reads nothing (so its
    /// stall is timed from when the room ran out) and clears once there is room again.
    /// The error answer of a stream cut off then may have to wait for room, up to the
    /// connection's write deadline (Linux reports no room while up to a third of the
    /// buffer is still free, which the short answer usually fits in).
    fn behind(&self) -> Option<u64> {
        let peer = self.peer?;
        let Some(unsent) = peer.unsent_bytes() else {
            return (!peer.has_room()).then(|| self.sse.bytes_written());
        };
        let unsent = Some(unsent).filter(|unsent| *unsent > 0)?;
        let sent_up_to = self.sse.bytes_written().saturating_sub(unsent);
        let waiting = self
            .frame_ends
            .iter()
            .rev()
            .take_while(|end| **end > sent_up_to)
            .count();
        let too_much =
            waiting > self.queue_len || peer.send_buffer().is_some_and(|size| unsent > size / 4);
        too_much.then_some(unsent)
    }
}

/// A paused stream: since when its client has read nothing, and what was unsent then.
struct Stall {
    since: Instant,
    unsent: u64,
}

pub(super) fn run_listen(
    request: tiny_http::Request,
    listen: &Listen,
    service: &Service,
) -> io::Result<()> {
    let id = &listen.subscription_id;
    let limits = service.hub.limits();
    let peer = request.socket_fd().map(Peer::new);
    let mut out = Outlet {
        sse: SseWriter::start(request)?,
        peer,
        frame_ends: VecDeque::new(),
        queue_len: limits.queue_len,
    };
    out.send_frame(&acknowledgement(listen))?;
    let keep_alive = Duration::from_millis(limits.keep_alive_ms);
    let lifetime = Duration::from_millis(limits.max_stream_lifetime_ms);
    let max_stall = Duration::from_millis(limits.max_stall_ms);
    let mailbox = &listen.subscription.mailbox;
    let opened = Instant::now();
    let mut last_write = opened;
    let mut last_probe = opened;
    let mut stalled: Option<Stall> = None;
    // Frames taken from the mailbox but not written yet (the stream paused mid-batch).
    let mut taken: VecDeque<Frame> = VecDeque::new();
    let mut finished_tasks: HashSet<String> = HashSet::new();
    loop {
        let left = lifetime.saturating_sub(opened.elapsed());
        if left.is_zero() {
            break;
        }
        if last_probe.elapsed() >= PROBE_PERIOD {
            last_probe = Instant::now();
            if out.peer.is_some_and(Peer::hung_up) {
                // End now, so the caller frees the slot. The graceful answer is for a
                // client that only half-closed and still reads; to one that is gone,
                // it is a write the kernel discards.
                break;
            }
        }
        if let Some(stall) = &mut stalled {
            if let Some(unsent) = out.behind() {
                if mailbox.is_closing() {
                    break;
                }
                if unsent < stall.unsent {
                    // The client read something: slow, not stalled.
                    *stall = Stall {
                        since: Instant::now(),
                        unsent,
                    };
                } else if stall.since.elapsed() >= max_stall {
                    return cut_off(out, id, max_stall);
                }
                std::thread::sleep(PROBE_PERIOD.min(left));
                continue;
            }
            stalled = None;
        }
        if taken.is_empty() {
            let quiet_left = keep_alive.saturating_sub(last_write.elapsed());
            match mailbox.wait(PROBE_PERIOD.min(quiet_left).min(left)) {
                Delivery::Frames(frames) => taken.extend(frames),
                Delivery::Close => break,
                Delivery::Revoked => return revoked(out, id),
                Delivery::Idle => {
                    if last_write.elapsed() >= keep_alive {
                        out.sse.keep_alive()?;
                        last_write = Instant::now();
                    }
                    continue;
                }
            }
        }
        while let Some(frame) = taken.pop_front() {
            let Some(message) = render_frame(listen, service, frame, &mut finished_tasks) else {
                continue;
            };
            out.send_frame(&message)?;
            last_write = Instant::now();
            if let Some(unsent) = out.behind() {
                stalled = Some(Stall {
                    since: last_write,
                    unsent,
                });
                break;
            }
        }
    }
    out.sse.send(&final_answer(listen))?;
    out.sse.finish()
}

/// The first message of a listen stream.
pub(crate) fn acknowledgement(listen: &Listen) -> Value {
    let id = &listen.subscription_id;
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": { "notifications": listen.filter.to_json(), "_meta": { META_SUBSCRIPTION_ID: id } },
    })
}

/// The graceful last message of a listen stream: the answer to the listen request.
pub(crate) fn final_answer(listen: &Listen) -> Value {
    let id = &listen.subscription_id;
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": { "resultType": "complete", "_meta": { META_SUBSCRIPTION_ID: id } },
    })
}

/// The notification a hub frame becomes on `listen`'s stream, tagged with its
/// subscription id; `None` when this stream does not send it. A task's status is read
/// afresh with the subscriber's identity; `finished_tasks` remembers the terminal ones.
pub(crate) fn render_frame(
    listen: &Listen,
    service: &Service,
    frame: Frame,
    finished_tasks: &mut HashSet<String>,
) -> Option<Value> {
    let id = &listen.subscription_id;
    let tag = |mut params: Map<String, Value>| {
        params.insert("_meta".into(), json!({ META_SUBSCRIPTION_ID: id }));
        params
    };
    match frame {
        Frame::ListChanged(kind) => {
            Some(json!({ "jsonrpc": "2.0", "method": kind.method(), "params": tag(Map::new()) }))
        }
        // Only legacy sessions' relay asks for these; a listen filter never does.
        Frame::ResourceUpdated(_) => None,
        Frame::TaskChanged { task_id, seq } => {
            let wanted = listen.filter.task_ids.contains(&task_id)
                && seq > listen.changes_after
                && !finished_tasks.contains(&task_id);
            if !wanted {
                return None;
            }
            // One fresh read with the subscriber's identity covers every hint the
            // mailbox coalesced for this task.
            let task = service.task_notification(
                &listen.identity,
                &listen.scopes,
                &listen.capabilities,
                &task_id,
            )?;
            if task.terminal {
                finished_tasks.insert(task_id);
            }
            Some(
                json!({ "jsonrpc": "2.0", "method": "notifications/tasks", "params": tag(task.params) }),
            )
        }
    }
}

/// Ends a stream whose credential a reload revoked: an error answer to the listen
/// request, then the end of the response.
fn revoked(out: Outlet, id: &Value) -> io::Result<()> {
    let error = RpcError::new(
        code::INTERNAL_ERROR,
        "Subscription ended: the credential it was opened with is no longer accepted",
    );
    let mut sse = out.sse;
    sse.send(&error_body(id, &error))?;
    sse.finish()
}

/// Ends a stream whose client stopped reading: an error answer to the listen request
/// (there is room for it in the socket, see [`Outlet::behind`]), then the end of the
/// response. The client reads it after the frames before it.
fn cut_off(out: Outlet, id: &Value, stalled: Duration) -> io::Result<()> {
    log::warn!("ended a listen stream whose client stopped reading");
    let error = RpcError::new(
        code::INTERNAL_ERROR,
        format!(
            "Subscription ended: the client fell behind (notifications went unread for {} ms); \
             send subscriptions/listen again to resume",
            stalled.as_millis()
        ),
    );
    let mut sse = out.sse;
    sse.send(&error_body(id, &error))?;
    sse.finish()
}
