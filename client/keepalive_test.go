package client

import (
	"testing"
	"time"
)

// The keepalive watch, driven tick by tick with an injected clock: a ping
// goes out after a quarter interval of silence, the connection ends only
// once that ping is unanswered and nothing came for a whole interval,
// bytes from the node (any frame) keep it however late the pong, and an
// answered ping lets the next one go after the next quarter of silence.
func TestKeepaliveWatchPingsAfterAQuarterAndClosesAfterAWholeIntervalOfSilence(t *testing.T) {
	const interval = 100 * time.Millisecond
	start := time.Unix(1_000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	w := keepaliveWatch{interval: interval, heard: 10, heardAt: start}

	if w.silentTooLong(at(10), 10) || w.shouldPing(at(10)) {
		t.Fatal("10 ms of silence: no ping yet, and no close")
	}
	if w.silentTooLong(at(25), 10) || !w.shouldPing(at(25)) {
		t.Fatal("a quarter interval of silence: a ping goes out")
	}
	answered := make(chan struct{})
	w.pinged(answered)
	if w.shouldPing(at(50)) {
		t.Fatal("a second ping while the first is unanswered")
	}
	if w.silentTooLong(at(75), 10) {
		t.Fatal("closed before a whole interval of silence")
	}
	// The node sends something else (a delivery); the pong waits behind it.
	if w.silentTooLong(at(80), 500) || w.silentTooLong(at(175), 500) {
		t.Fatal("closed a connection the node talked on less than an interval ago")
	}
	if !w.silentTooLong(at(180), 500) {
		t.Fatal("a ping unanswered and a whole interval without a byte: the connection must end")
	}

	// Answered: no close, and the next ping only after a new quarter.
	w = keepaliveWatch{interval: interval, heard: 10, heardAt: start}
	w.pinged(answered)
	close(answered)
	if w.silentTooLong(at(40), 20) {
		t.Fatal("closed a connection whose ping was answered")
	}
	if w.shouldPing(at(50)) || !w.shouldPing(at(65)) {
		t.Fatal("the next ping goes a quarter interval after the pong, not before")
	}
	if w.silentTooLong(at(1_000), 20) {
		t.Fatal("closed with no ping unanswered: silence alone never closes (the next ping asks first)")
	}
}
