package edge

import "github.com/meshweaver/supervisor/third_party/hollywood/remote"

// Remote is the gate as the transport calls it (remote.Config.WithGate).
func (g *Gate) Remote() remote.Gate {
	return func(in remote.Inbound) (any, bool) {
		return g.Check(Input{Identity: in.Peer.Identity, Addr: in.Peer.Addr,
			Target: in.Target, Sender: in.Sender, Msg: in.Msg})
	}
}

// OnRefuse records the transport's own refusals
// (remote.Config.WithOnRefuse): counted by reason, logged sampled.
func (g *Gate) OnRefuse(r remote.Refusal) {
	g.Refused(r.Reason, r.Peer.Identity, r.Peer.Addr, r.Err)
}
