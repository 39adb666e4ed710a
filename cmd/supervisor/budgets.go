package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshweaver/supervisor/actors/budget"
)

// budgetOptions are the serve flags of the users' token budgets (package
// budget; docs/OPERATIONS.md, "Token budgets"). All of them reload on
// SIGHUP.
type budgetOptions struct {
	tokens      int64
	window      time.Duration
	cachedInput bool
	overrun     int64
	file        string
}

// budgetFlags are the budgets' flag names, all reloadable.
var budgetFlags = []string{"user-token-budget", "budget-window", "budget-cached-input", "budget-overrun", "budgets"}

func (o *budgetOptions) register(fs *flag.FlagSet) {
	fs.Int64Var(&o.tokens, "user-token-budget", 0, "`TOKENS` each user may spend in --budget-window (input and output; overridden per user and group by --budgets); a round of a user at the budget is refused before it reaches the model; 0: no budget")
	fs.DurationVar(&o.window, "budget-window", budget.DefaultWindow, "the rolling window a budget counts spend in: spend older than it no longer counts")
	fs.BoolVar(&o.cachedInput, "budget-cached-input", true, "cached input tokens count against the budget (they are part of the input as the API reports it); false: only the input that was not cached, and the output")
	fs.Int64Var(&o.overrun, "budget-overrun", 0, "`TOKENS` a running turn may spend past its user's budget before it is interrupted (0: it is interrupted once a report puts the user at the budget)")
	fs.StringVar(&o.file, "budgets", "", "JSON `FILE` of budgets per user and per group, over --user-token-budget (docs/OPERATIONS.md, \"Token budgets\")")
}

// rules are the budgets the flags and the file set.
func (o *budgetOptions) rules() (budget.Rules, error) {
	r := budget.Rules{Tokens: o.tokens, Window: o.window, CachedInput: o.cachedInput, Overrun: o.overrun}
	var errs []error
	if o.tokens < 0 {
		errs = append(errs, fmt.Errorf("--user-token-budget %d is negative", o.tokens))
	}
	if o.overrun < 0 {
		errs = append(errs, fmt.Errorf("--budget-overrun %d is negative", o.overrun))
	}
	if o.window < time.Second {
		errs = append(errs, fmt.Errorf("--budget-window %v: at least a second", o.window))
	}
	if o.file != "" {
		if err := budget.ReadFile(o.file, &r); err != nil {
			errs = append(errs, err)
		}
	}
	return r, errors.Join(errs...)
}

// validate checks the flags and the file.
func (o *budgetOptions) validate() error {
	_, err := o.rules()
	return err
}

// reload applies the budgets of a SIGHUP to the live users; invalid ones
// change nothing.
func (o *budgetOptions) reload(h *budget.Holder, log *slog.Logger) {
	r, err := o.rules()
	if err != nil {
		log.Error("reload: the budgets are not valid; kept the loaded ones", "err", err)
		return
	}
	h.Set(r)
	log.Info("reloaded the token budgets", "user_token_budget", r.Tokens, "window", r.Window, "users", len(r.Users), "groups", len(r.Groups))
}
