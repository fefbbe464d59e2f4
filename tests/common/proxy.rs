//! A TCP forwarder between mara and a server that a test can stall: while stalled, it moves no
//! byte either way (connections stay open, new ones are accepted and wait), as a network that
//! hangs looks to both ends.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct Proxy {
    port: u16,
    stalled: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl Proxy {
    /// Forwards 127.0.0.1:<its port> to 127.0.0.1:`upstream`.
    pub fn to(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the proxy");
        let port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let (stall, close) = (stalled.clone(), closed.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if close.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let stall = stall.clone();
                    std::thread::spawn(move || pump(from, to, &stall));
                }
            }
        });
        Proxy {
            port,
            stalled,
            closed,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Moves no byte until `resume`.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.stalled.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        self.resume();
        // Wakes the accepting thread so that it sees it is closed.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to`, holding each chunk while stalled.
fn pump(mut from: TcpStream, mut to: TcpStream, stalled: &AtomicBool) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        while stalled.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while stalled.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
