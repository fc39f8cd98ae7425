package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/layerstream/layerstream/hub"
)

func init() {
	register(command{
		name:    "download",
		summary: "download a model from the Hugging Face Hub into the local cache and print its folder",
		usage:   "<repo-id>",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			revision := fs.String("revision", "", "branch, tag or commit to download (default main)")
			token := fs.String("token", "", "Hugging Face access token for gated or private repos (default $HF_TOKEN, then $HF_HOME/token)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usageErrorf("expected one repo id, got %d arguments", len(args))
				}
				if !hub.IsRepoID(args[0]) {
					return usageErrorf("%q is not a Hugging Face repo id like org/name (or it is a local path)", args[0])
				}
				opts := hub.OptionsFromEnv()
				if *revision != "" {
					opts.Revision = *revision
				}
				if *token != "" {
					opts.Token = *token
				}
				opts.Progress = progressOut()
				dir, err := hub.Resolve(ctx, args[0], opts)
				if err != nil {
					return err
				}
				fmt.Println(dir)
				return nil
			}
		},
	})
}
