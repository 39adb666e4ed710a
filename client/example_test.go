package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
)

// A round: stream the answer as it comes, then read the verdict.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, daemonAddr) // add client.WithTLSFiles(cert, key, ca) for mutual TLS
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	r, err := c.Round(ctx, messages.StartRound{User: "ann", Thread: "example/round", Text: "Say hello."})
	if err != nil {
		log.Fatal(err)
	}
	var answer strings.Builder
	for e := range r.Events() {
		if e.Kind == messages.KindText {
			answer.WriteString(e.Text)
		}
	}
	v, err := r.Wait()
	if err != nil {
		log.Fatal(err) // no verdict: unreachable, rejected, ctx ended
	}
	fmt.Println(answer.String())
	fmt.Println("status:", v.Status)
	// Output:
	// Hello from the fake app-server.
	// status: completed
}

// The daemon's refusal is a *client.RejectedError with its reason.
func ExampleRejectedError() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, daemonAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Account(ctx, "not a user id")
	if rej, ok := errors.AsType[*client.RejectedError](err); ok {
		fmt.Println("rejected", rej.Type)
	}
	// Output:
	// rejected account_request.v1
}

// A device-code login: show the challenge to the person, then learn the
// outcome. This one is cancelled as soon as the code is shown.
func ExampleClient_Login() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, daemonAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	done, err := c.Login(ctx, "login-example", func(ch messages.LoginChallenge) {
		fmt.Printf("Open %s and enter the code %s\n", ch.VerificationURL, ch.UserCode)
		if err := c.CancelLogin(ctx, "login-example"); err != nil {
			log.Fatal(err)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("logged in:", done.Success)
	// Output:
	// Open https://auth.openai.com/codex/device and enter the code FAKE-1234
	// logged in: false
}

// The models a user's codex offers.
func ExampleClient_Models() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, daemonAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	models, err := c.Models(ctx, "ann")
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range models.Models {
		if m.IsDefault {
			fmt.Println("has a default model:", m.ID != "")
		}
	}
	// Output:
	// has a default model: true
}

// Attach: a round's events after a seq, and its verdict, from another
// connection (or after this one was lost); a finished round stays
// attachable for the daemon's retention.
func ExampleClient_Attach() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, daemonAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r, err := c.Round(ctx, messages.StartRound{User: "ann", Thread: "example/attach", Text: "Say hello."})
	if err != nil {
		log.Fatal(err)
	}
	var last uint64
	for e := range r.Events() {
		last = e.Seq
		break // the connection "drops" after the first event
	}

	again, err := c.Attach(ctx, "ann", r.ID(), last)
	if err != nil {
		log.Fatal(err)
	}
	for e := range again.Events() {
		if e.Seq <= last {
			log.Fatalf("event %d seen twice", e.Seq)
		}
	}
	v, err := again.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", v.Status)
	// Output:
	// status: completed
}
