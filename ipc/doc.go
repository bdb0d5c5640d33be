// Package ipc owns the guest channel, host side: the only way out of a jail.
//
// The jail gives each run a channel (two FIFOs in the job's root, see
// PROTOCOL.md) and hands its host end to Serve as a net.Conn. It sends the start
// frame (input, declared capabilities, options), then answers the guest's
// calls until the guest sends done or error, the channel closes, the run's
// context ends, or the guest breaks the protocol.
//
// Every frame from the guest is hostile: lengths are checked before memory
// is reserved, a frame that starts must finish within FrameTimeout, JSON is
// validated and its nesting bounded before it is decoded, calls are counted
// and their concurrency capped, logs have count and byte budgets, and a
// guest that stops reading its replies cannot block the supervisor (write
// deadlines). A protocol breach ends the session with Outcome.ProtocolError.
//
// The broker checks each call against what the job declared (Capabilities,
// validated and bounded by the operator's Ceiling) and performs it on the
// host. request.send reaches only declared origins (exact scheme, host and
// port) with declared methods; the host name is resolved once and the
// connection pinned to an address that is not loopback, private, link-local,
// CGNAT, metadata, multicast or unspecified, in whatever IPv6 form it comes
// (a literal IP origin is judged the same; an origin in
// Ceiling.PrivateOrigins may reach a private address, and
// Ceiling.AllowPrivateAddresses lifts the rule); no proxy from the
// environment is used; redirects are followed manually and re-checked;
// a method override must name a declared method; bodies and the guest's
// headers are capped; operator secrets are injected as headers by name, only
// on the origins each secret names, and scrubbed from what comes back. A
// failing call is a reply with an error code,
// never a crash: each call runs under recover.
package ipc
