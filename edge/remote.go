package edge

import (
	"fmt"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// Remote is the gate as the transport calls it (remote.Config.WithGate).
func (g *Gate) Remote() remote.Gate {
	return func(in remote.Inbound) (any, bool) {
		return g.Check(Input{Identity: in.Peer.Identity, Addr: in.Peer.Addr,
			Target: in.Target, Sender: in.Sender, Msg: in.Msg})
	}
}

// OnRefuse records the transport's own refusals
// (remote.Config.WithOnRefuse): counted by reason, logged sampled. A
// message refused because its sender could not be bound (the daemon could
// not dial the sender's address back, or it presented another identity)
// is answered back over the connection it came on (Refusal.Reply), as the
// gate answers its own refusals: its caller hears at once why, instead of
// waiting out its timeout.
func (g *Gate) OnRefuse(r remote.Refusal) {
	g.Refused(r.Reason, r.Peer.Identity, r.Peer.Addr, r.Err)
	if r.Reply == nil || r.Sender == nil || r.Msg == nil || r.Sender.Address == g.cfg.Self {
		return // a sender on the daemon's own address is never answered (ReasonInternal)
	}
	msg, err := messages.Unwrap(r.Msg)
	if err != nil {
		return // undecodable: nothing to answer in its terms
	}
	in := Input{Identity: r.Peer.Identity, Addr: r.Peer.Addr, Sender: r.Sender, Msg: msg}
	why := fmt.Errorf("the daemon cannot verify the sender's address %s: %w", clip(r.Sender.Address, 100), r.Err)
	g.answer(in, PeerKey(r.Peer.Identity, r.Peer.Addr, r.Sender), msg, why, func(to *actor.PID, m any) {
		env, err := messages.Encode(m)
		if err == nil {
			err = r.Reply(to, env)
		}
		if err != nil {
			g.log.Debug("answering a refused sender over its connection", "err", err)
		}
	})
}
