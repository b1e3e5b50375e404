//! Responses written together: the gRPC listener's connections defer their
//! first write of each flush by one turn of the scheduler.
//!
//! Without it each response cost a `writev` of its own (0.84 per decision,
//! measured with `loadgen`, 128 requests in flight over 2 connections): the
//! task answering a request wakes the connection's task, which tokio runs
//! next, and which writes that one response and flushes. Deferred, the
//! connection's task goes to the back of its worker's run queue (a task that
//! wakes itself while it runs is rescheduled as a yield), so the answers
//! completed meanwhile are written with it in one `writev`. A connection
//! with nothing else to wait for is polled again at once: the cost is one
//! extra poll, not a timer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where a connection is in its current flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Nothing written since the last flush: the next write is deferred.
    Idle,
    /// The first write was deferred; the next goes through.
    Deferred,
    /// Writing: every write goes through until the flush.
    Writing,
}

/// A connection whose writes are gathered as the module says.
#[derive(Debug)]
pub(crate) struct Coalesced<T> {
    inner: T,
    turn: Turn,
}

impl<T> Coalesced<T> {
    /// `inner`, its writes gathered.
    pub(crate) fn new(inner: T) -> Self {
        Coalesced {
            inner,
            turn: Turn::Idle,
        }
    }

    /// `Pending` (the task woken to come back after the others) if this is the
    /// first write since the last flush; else ready to write.
    fn defer_first(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.turn {
            Turn::Idle => {
                self.turn = Turn::Deferred;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Turn::Deferred | Turn::Writing => {
                self.turn = Turn::Writing;
                Poll::Ready(())
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.defer_first(cx));
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.defer_first(cx));
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        if flushed.is_ready() {
            this.turn = Turn::Idle;
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for Coalesced<T> {
    type ConnectInfo = T::ConnectInfo;
    fn connect_info(&self) -> T::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A writer recording each write call it gets, accepting at most `max` bytes a call.
    #[derive(Default)]
    struct Sink {
        calls: Vec<Vec<u8>>,
        max: usize,
    }
    impl AsyncWrite for Sink {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.max);
            self.calls.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn write(c: &mut Coalesced<Sink>, cx: &mut Context<'_>, b: &[u8]) -> Poll<usize> {
        Pin::new(c)
            .poll_write(cx, b)
            .map(|r| r.expect("a sink never fails"))
    }

    #[test]
    fn the_first_write_of_a_flush_waits_one_turn_and_the_rest_go_through() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut c = Coalesced::new(Sink {
            max: 3,
            ..Sink::default()
        });
        // Deferred: nothing written, the task woken to come back.
        assert_eq!(write(&mut c, &mut cx, b"hello"), Poll::Pending);
        assert!(c.inner.calls.is_empty());
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        // Back: a partial write, and its rest, both go through at once.
        assert_eq!(write(&mut c, &mut cx, b"hello"), Poll::Ready(3));
        assert_eq!(write(&mut c, &mut cx, b"lo"), Poll::Ready(2));
        assert_eq!(c.inner.calls, [b"hel".to_vec(), b"lo".to_vec()]);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        // The flush ends the turn: the next write waits again.
        assert!(Pin::new(&mut c).poll_flush(&mut cx).is_ready());
        let bufs = [io::IoSlice::new(b"ab")];
        assert!(Pin::new(&mut c)
            .poll_write_vectored(&mut cx, &bufs)
            .is_pending());
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
        assert_eq!(c.inner.calls.len(), 2);
        let again = Pin::new(&mut c).poll_write_vectored(&mut cx, &bufs);
        assert!(matches!(again, Poll::Ready(Ok(2))), "{again:?}");
    }
}
