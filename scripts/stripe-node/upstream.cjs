// A fake Stripe for scripts/stripe-node-refusals: POST /v1/charges answers
// 200 with a charge; a request whose body has description=die loses its
// answer (the connection is destroyed after the charge), and one with
// description=slow answers after two seconds. It prints its address on
// its first line.
'use strict';
const http = require('http');
let n = 0;
const srv = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    const params = new URLSearchParams(body);
    n++;
    const charge = JSON.stringify({ id: `ch_${n}`, object: 'charge', amount: Number(params.get('amount')) });
    const answer = () => {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Request-Id': `req_${n}` });
      res.end(charge);
    };
    switch (params.get('description')) {
      case 'die': req.socket.destroy(); return;
      case 'slow': setTimeout(answer, 2000); return;
      default: answer();
    }
  });
});
srv.listen(0, '127.0.0.1', () => console.log(`127.0.0.1:${srv.address().port}`));
