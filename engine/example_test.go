package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/tokenizer"
)

// Open a model (a Hugging Face checkpoint folder, split into per-layer shards on first use; a shard folder; or
// a Hub repo id, downloaded into the Hugging Face cache) and generate text from a plain prompt, printing it as
// it comes.
func Example() {
	ctx := context.Background()
	e, err := engine.Open(ctx, "HuggingFaceTB/SmolLM2-135M-Instruct", engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	res, err := e.GenerateText(ctx, engine.TextRequest{Prompt: "Once upon a time", MaxNewTokens: 64},
		func(c engine.TextChunk) error {
			fmt.Print(c.Text)
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n(%d tokens, stopped by %s)\n", len(res.GeneratedIDs), res.StopReason)
}

// Text in, text out: a chat rendered with the model's chat template, sampled, ended by a stop string.
func ExampleEngine_GenerateText() {
	ctx := context.Background()
	e, err := engine.Open(ctx, "models/SmolLM2-135M-Instruct", engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	res, err := e.GenerateText(ctx, engine.TextRequest{
		Messages: []tokenizer.Message{
			{Role: "system", Content: "You answer in one sentence."},
			{Role: "user", Content: "What is the capital of France?"},
		},
		MaxNewTokens: 100,
		Sampling:     engine.Sampling{Temperature: 0.7, TopP: 0.9, Seed: 42},
		Stop:         []string{"\n\n"},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text)
}

// Token ids in, token ids out; several goroutines calling Generate share each layer load (continuous
// batching): a request joins the running batch at the next step.
func ExampleEngine_Generate() {
	ctx := context.Background()
	e, err := engine.Open(ctx, "models/TinyLlama-1.1B", engine.Options{MaxBatch: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	prompts := [][]int{{1, 450, 4996}, {1, 9038, 2501, 263, 931}}
	var wg sync.WaitGroup
	for _, ids := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Generate(ctx, engine.Request{PromptIDs: ids, MaxNewTokens: 32}, nil)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return
			}
			fmt.Println(ids, "→", res.GeneratedIDs, res.StopReason)
		}()
	}
	wg.Wait()
}

// A conversation whose turns reuse the keys and values computed for the earlier ones: each request's prompt
// is the whole chat so far, and only what the session does not hold yet is computed.
func ExampleEngine_NewSession() {
	ctx := context.Background()
	e, err := engine.Open(ctx, "models/SmolLM2-135M-Instruct", engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	s := e.NewSession()
	defer s.Close()
	var chat []tokenizer.Message
	for _, question := range []string{"Name a colour.", "And another one?"} {
		chat = append(chat, tokenizer.Message{Role: "user", Content: question})
		res, err := e.GenerateText(ctx, engine.TextRequest{Messages: chat, MaxNewTokens: 50, Session: s}, nil)
		if err != nil {
			log.Fatal(err)
		}
		chat = append(chat, tokenizer.Message{Role: "assistant", Content: res.Text})
		fmt.Printf("%s (%d prompt tokens reused)\n", res.Text, res.CachedPromptTokens)
	}
}
