//! ggml's RPC client closes its sockets without telling native/rpc_client.cpp, and the
//! system hands the descriptor to the next socket: a new client, or in a process that also
//! serves (the golden tests' in-process workers) a worker's accepted connection. A failure
//! recorded on the closed connection must not fail that socket: a worker that found its
//! descriptor "failed" hung up on its client at the first byte (a CI run's broken pipe).

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

// Links the native library, which holds the functions below.
use ggml_sys as _;

extern "C" {
    fn elelem_rpc_connect(fd: i32, addr: *const libc::sockaddr, len: libc::socklen_t) -> i32;
    fn elelem_rpc_send(fd: i32, buf: *const libc::c_void, n: usize, flags: i32) -> isize;
    fn elelem_rpc_recv(fd: i32, buf: *mut libc::c_void, n: usize, flags: i32) -> isize;
}

#[test]
fn a_descriptor_given_to_another_socket_is_not_the_failed_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    assert_eq!(unsafe { elelem_rpc_connect(fd, (&raw const addr).cast(), len) }, 0);

    // The worker hangs up: the client's next receive records the connection as failed,
    // and later sends on it fail at once.
    drop(listener.accept().unwrap().0);
    let mut byte = 0u8;
    assert_eq!(unsafe { elelem_rpc_recv(fd, (&raw mut byte).cast(), 1, 0) }, 0);
    assert_eq!(unsafe { elelem_rpc_send(fd, b"x".as_ptr().cast(), 1, 0) }, -1);

    // Closed; its descriptor now another socket's (dup2 gives it the same number).
    let other = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    unsafe { libc::close(fd) };
    assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), fd) }, fd);
    assert_eq!(unsafe { elelem_rpc_send(fd, b"x".as_ptr().cast(), 1, 0) }, 1);
    let mut got = [0u8; 1];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"x");
    unsafe { libc::close(fd) };
}
