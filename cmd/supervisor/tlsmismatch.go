package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/meshweaver/supervisor/client"
)

// tlsProbeTimeout bounds the probe of a daemon a call found unreachable.
const tlsProbeTimeout = 2 * time.Second

// What a listener made of a TLS hello (speaksTLS).
const (
	helloUnknown  = iota // not reached
	helloTLS             // a server hello, or a TLS alert
	helloPlain           // bytes that are no TLS record, or a hang-up
	helloUnheeded        // nothing within tlsProbeTimeout: a TLS server answers at once
)

// explainUnreachable names a TLS mismatch between this caller and the
// daemon at addr when err says the daemon was unreachable: the remote
// gives a caller nothing to read but a closed connection (EOF) or a dial
// timeout either way, since a TLS listener cannot answer a plaintext
// caller in its own terms, nor a plaintext one a TLS caller. The daemon is
// asked once more, with a TLS hello of its own (speaksTLS). err is
// returned as it is when there is no mismatch to name, and wrapped
// otherwise.
func explainUnreachable(err error, addr string, tlsOn bool) error {
	if !errors.Is(err, client.ErrUnreachable) {
		return err
	}
	switch hello := speaksTLS(addr); {
	case hello == helloTLS && !tlsOn:
		return fmt.Errorf("the daemon at %s expects TLS: give --tls-cert, --tls-key and --tls-ca (or $SUPERVISOR_TLS_CERT, _KEY, _CA), and --server-id where its certificate does not name the host (%w)", addr, err)
	case hello == helloPlain && tlsOn:
		return fmt.Errorf("the daemon at %s does not speak TLS: it serves plaintext, so drop --tls-* (and $SUPERVISOR_TLS_*), or give the daemon its --tls-* (%w)", addr, err)
	case hello == helloUnheeded && tlsOn:
		return fmt.Errorf("the daemon at %s does not speak TLS: it left a TLS hello unanswered for %v, as a plaintext daemon does; drop --tls-* (and $SUPERVISOR_TLS_*), or give the daemon its --tls-* (%w)", addr, tlsProbeTimeout, err)
	}
	return err
}

// speaksTLS says what the listener at addr makes of a TLS hello. The
// probe verifies no certificate: it sends nothing but the hello over the
// connection, which it closes at once.
func speaksTLS(addr string) int {
	ctx, cancel := context.WithTimeout(context.Background(), tlsProbeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return helloUnknown
	}
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) // a hello, no data: see above
	defer tc.Close()
	err = tc.HandshakeContext(ctx)
	var alert tls.AlertError
	var header tls.RecordHeaderError
	switch {
	case err == nil, errors.As(err, &alert):
		return helloTLS
	case errors.As(err, &header):
		return helloPlain
	case ctx.Err() != nil:
		return helloUnheeded
	}
	return helloPlain // a hang-up on a hello (EOF, reset): no TLS server
}
