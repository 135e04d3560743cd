package lock_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/lock"
)

// TestConfigErrors: Do's required arguments and FencedTable's names are
// reported as a *idem.ConfigError of package lock naming them.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	configtest.Want(t, lock.Do(ctx, nil, "n", func(context.Context, lock.Fence) error { return nil }), "lock", "l")
	configtest.Want(t, lock.Do(ctx, &memLocker{}, "n", nil), "lock", "fn")
	for field, ft := range map[string]lock.FencedTable{
		"FencedTable.Table":        {Table: "a b", KeyColumn: "id"},
		"FencedTable.KeyColumn":    {Table: "accounts"},
		"FencedTable.FenceColumn":  {Table: "accounts", KeyColumn: "id", FenceColumn: "ID"},
		"FencedTable.Placeholders": {Table: "accounts", KeyColumn: "id", Placeholders: 7},
	} {
		configtest.Want(t, ft.Update(ctx, nil, 1, 1, ""), "lock", field)
	}
	ok := lock.FencedTable{Table: "accounts", KeyColumn: "id"}
	configtest.Want(t, ok.Update(ctx, nil, 1, 1, ""), "lock", "db")
}
