//! Free local ports, for the admin endpoint, proxies and servers a test starts: bind port 0,
//! note the port, let it go.

use std::net::SocketAddr;

/// A local address nothing listens on now.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
}

/// A local port nothing listens on now.
pub fn free_port() -> u16 {
    free_addr().port()
}
