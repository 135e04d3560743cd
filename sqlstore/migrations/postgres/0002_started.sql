-- idem records, version 2: started is set by Store.MarkStarted (the owner's
-- work is about to have effects outside the store). It survives takeovers
-- and is cleared by Release and by a fresh acquisition.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS started boolean NOT NULL DEFAULT false;
