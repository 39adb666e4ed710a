package main

import (
	"fmt"
	"os"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// usage: prog listen peer n
func main() {
	listen, peer := os.Args[1], os.Args[2]
	r := remote.New(listen, remote.NewConfig().WithLimits(remote.Limits{KeepaliveInterval: 100 * time.Millisecond}))
	defer r.Hold(peer)()
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(r))
	if err != nil {
		panic(err)
	}
	got := make(chan string, 100)
	e.SpawnFunc(func(c *actor.Context) {
		if m, ok := c.Message().(*wrapperspb.StringValue); ok && c.Sender() != nil {
			c.Engine().SendWithSender(c.Sender(), wrapperspb.String("echo:"+m.Value), c.PID())
		}
	}, "echo", actor.WithID("echo"))
	sink := e.SpawnFunc(func(c *actor.Context) {
		if m, ok := c.Message().(*wrapperspb.StringValue); ok {
			got <- m.Value
		}
	}, "sink", actor.WithID("sink"))
	time.Sleep(500 * time.Millisecond) // the other process starts listening
	target := actor.NewPID(peer, "echo/echo")
	for round := 0; round < 2; round++ {
		for i := 0; i < 5; i++ {
			e.SendWithSender(target, wrapperspb.String(fmt.Sprint("ours", round, i)), sink)
		}
		for i := 0; i < 5; i++ {
			select {
			case v := <-got:
				fmt.Println("ours got", v)
			case <-time.After(10 * time.Second):
				fmt.Println("ours: TIMEOUT")
				os.Exit(1)
			}
		}
		time.Sleep(1500 * time.Millisecond) // the other side sends keepalives meanwhile
	}
	time.Sleep(1 * time.Second) // answer the other side's last requests
	fmt.Println("ours OK")
}
