(function(){
var S=JSON.parse(document.getElementById('tl-summary').textContent);
var W=null;  // the word box's table, parsed when a word is first looked up (after the grid)
var cache={};
function el(tag,attrs,text){var e=document.createElement(tag);for(var k in attrs||{})
 e.setAttribute(k,attrs[k]);if(text!==undefined&&text!==null)e.textContent=text;return e;}
function fmt(v,d){if(v===null||v===undefined||(typeof v==='number'&&isNaN(v)))return '–';
 if(typeof v!=='number')return String(v);if(v===0)return '0';if(!isFinite(v))return v>0?'inf':'-inf';d=d||3;
 var e=Number(v.toExponential(d-1).split('e')[1]);  // Python's '%.{d}g', as style.number prints
 if(e<-4||e>=d){var m=v.toExponential(d-1).split('e'),x=Number(m[1]);return m[0].replace(/\.?0+$/,'')+'e'+
  (x<0?'-':'+')+(Math.abs(x)<10?'0':'')+Math.abs(x);}
 return v.toFixed(d-1-e).replace(/(\.\d*?)0+$/,'$1').replace(/\.$/,'');}
var RAMP=S.ramp;  // the diverging map's 256 colours (style.ramp): a value picks as matplotlib does
function shade(x){if(x===null||x===undefined||isNaN(x))return null;var t=(Math.max(-1,Math.min(1,x))+1)/2;
 return RAMP[Math.min(RAMP.length-1,Math.floor(t*RAMP.length))];}
function paler(c){return '#'+[1,3,5].map(function(k){var u=Math.round(parseInt(c.substr(k,2),16)*0.4+255*0.6);
 return (u<16?'0':'')+u.toString(16);}).join('');}
function luminance(c){var v=[1,3,5].map(function(k){var u=parseInt(c.substr(k,2),16)/255;
 return u<=0.04045?u/12.92:Math.pow((u+0.055)/1.055,2.4);});return 0.2126*v[0]+0.7152*v[1]+0.0722*v[2];}
function ink(c){var L=luminance(c);return (L+0.05)/0.05>=1.05/(L+0.05)?'#000000':'#ffffff';}
function paint(node,c){node.style.background=c||'';node.style.color=c?ink(c):'';}
function head(label){if(!(label in cache)){var n=document.querySelector(
 'script.tl-head[data-head="'+label+'"]');cache[label]=n?JSON.parse(n.textContent):null;}return cache[label];}
function scoreScale(name){var m=0;S.heads.forEach(function(h){var v=h.scores[name];
 if(typeof v==='number'&&isFinite(v))m=Math.max(m,Math.abs(v));});return m||1;}
function drawGrid(){var name=document.getElementById('tl-score').value,box=document.getElementById('tl-grid');
 box.textContent='';var t=el('table'),tr=el('tr');tr.appendChild(el('th'));
 for(var h=0;h<S.n_heads;h++)tr.appendChild(el('th',{},'H'+h));t.appendChild(tr);
 var at={};S.heads.forEach(function(x){at[x.label]=x;});var scale=scoreScale(name);
 for(var l=0;l<S.n_layers;l++){tr=el('tr');tr.appendChild(el('th',{},'L'+l));
  for(var h2=0;h2<S.n_heads;h2++){var lab='L'+l+'H'+h2,x=at[lab],td=el('td',{'class':'tl-cell','data-label':lab});
   if(x){var v=x.scores[name];if(name==='character'){td.style.background=S.colours[x.scores.character_key]||'#999';
     td.title=lab+': '+v;if(x.faint)td.style.opacity=0.45;}else{var c=shade(typeof v==='number'?v/scale:null);
     paint(td,c&&x.faint?paler(c):c);td.textContent=typeof v==='number'?fmt(v,2):'';
     td.title=lab+': '+fmt(v,4)+(x.verdict?' ('+x.verdict+')':'');}
    if(x.faint)td.classList.add('tl-faint');td.addEventListener('click',(function(q){return function(){openHead(q);};})(lab));}
   tr.appendChild(td);}t.appendChild(tr);}
 box.appendChild(t);drawLegend(name,scale);document.body.setAttribute('data-grid-drawn',String(performance.now()));}
function drawLegend(name,scale){var box=document.getElementById('tl-legend');box.textContent='';
 if(name==='character'){var seen={};S.heads.forEach(function(h){seen[h.scores.character_key]=true;});
  Object.keys(seen).forEach(function(k){var item=el('span',{'class':'tl-key'}),sw=el('span',{'class':'tl-swatch'});
   sw.style.background=S.colours[k]||'#999';item.appendChild(sw);item.appendChild(document.createTextNode(k||'–'));
   box.appendChild(item);});}
 else{var bar=el('span',{'class':'tl-ramp'});bar.style.background='linear-gradient(to right,'+[0,64,128,192,255].map(function(i){
   return RAMP[i];}).join(',')+')';box.appendChild(el('span',{},'−'+fmt(scale)));box.appendChild(bar);
  box.appendChild(el('span',{},'+'+fmt(scale)));box.appendChild(el('span',{'class':'tl-note'},' '+
   (S.score_names[name]||name)+'; blue negative, 0 white, red positive'));}
 if(S.heads.some(function(h){return h.faint;}))box.appendChild(el('div',{'class':'tl-note'},
  'paler, dashed: the verdict of W is negligible or not distinguished (as the tables dim it)'));
 (S.notes||[]).forEach(function(n){box.appendChild(el('div',{'class':'tl-note'},n));});}
function kv(rows){var t=el('table',{'class':'tl-kv'});rows.forEach(function(r){var tr=el('tr');
 tr.appendChild(el('td',{},r[0]));tr.appendChild(el('td',{'data-key':r[2]||''},fmt(r[1])));t.appendChild(tr);});return t;}
function shares(title,row){var box=el('div');box.appendChild(el('h3',{},title));if(!row){box.appendChild(
 el('p',{'class':'tl-note'},'not decomposed'));return box;}var t=el('table',{'class':'tl-shares'}),
 all=[].concat(Object.entries(row.family_shares||{}).map(function(e){return ['family: '+e[0],e[1]];}),
 Object.entries(row.shares||{}).map(function(e){return [e[0],e[1]];}));
 all.forEach(function(e){var tr=el('tr'),b=el('span',{'class':'tl-bar'});b.style.width=Math.round(
  120*Math.max(0,Math.min(1,e[1]||0)))+'px';tr.appendChild(el('td',{},e[0]));var td=el('td');td.appendChild(b);
  tr.appendChild(td);tr.appendChild(el('td',{},fmt(e[1])));t.appendChild(tr);});box.appendChild(t);
 box.appendChild(el('p',{'class':'tl-note'},'explained R² '+fmt(row.explained)+' (Shapley shares add up to it); '+
  'cosine '+fmt(row.cosine)+(row.lo!==undefined?' ['+fmt(row.lo)+', '+fmt(row.hi)+']':'')+
  (row.excess!==undefined?'; excess '+fmt(row.excess)+' ('+row.verdict+'), z '+fmt(row.z)+', q '+fmt(row.q):'')));
 return box;}
function full(lower){var n=lower.length;return lower.map(function(r){var o=r.slice();while(o.length<n)o.push(0);return o;});}
function predicted(c){return S.scores.map(function(r){var m=-Infinity;r.forEach(function(v){m=Math.max(m,c*v);});
 var e=r.map(function(v){return Math.exp(c*v-m);}),s=e.reduce(function(a,b){return a+b;},0);
 return e.map(function(v){return v/s;});});}
function attention(box,label,d){box.appendChild(el('h3',{},'Attention on the text: '+label+' and its prediction'));
 var row=el('div',{'class':'tl-row'}),a=el('div',{'class':'tl-attn','id':'tl-attn-actual'}),
 p=el('div',{'class':'tl-attn','id':'tl-attn-predicted'});a.appendChild(el('h3',{},label+' (model)'));
 p.appendChild(el('h3',{},'predicted, '+(d.scale_text||'c = '+fmt(d.scale))));row.appendChild(a);row.appendChild(p);box.appendChild(row);
 var act=full(d.actual.map(function(r){return r.map(function(v){return v/1000;});})),pre=full(predicted(d.scale||0));
 [[a,act],[p,pre]].forEach(function(x){var inner=el('div');x[0].appendChild(inner);inner.id=x[0].id+'-cv';
  if(window.CircuitsVis&&CircuitsVis.AttentionPattern){CircuitsVis.render(inner.id,CircuitsVis.AttentionPattern,
   {tokens:S.tokens,attention:x[1]});}else{inner.appendChild(canvasPattern(x[1]));}});}
function canvasPattern(m){var n=m.length,c=el('canvas',{width:String(n*8),height:String(n*8)}),g=c.getContext('2d');
 for(var i=0;i<n;i++)for(var j=0;j<=i;j++){g.fillStyle=shade(m[i][j]);g.fillRect(j*8,i*8,8,8);}return c;}
function pairs(title,a,b,an,bn){var box=el('div');box.appendChild(el('h3',{},title));var row=el('div',{'class':'tl-row'});
 [[an,a],[bn,b]].forEach(function(x){var t=el('table',{'class':'tl-pairs'}),tr=el('tr');
  tr.appendChild(el('th',{},x[0]));tr.appendChild(el('th',{},'value'));t.appendChild(tr);(x[1]||[]).forEach(function(p){
   tr=el('tr',{'class':'tl-pair'});tr.appendChild(el('td',{},p[0]+' → '+p[1]));tr.appendChild(el('td',{},fmt(p[2])));
   t.appendChild(tr);});row.appendChild(t);});box.appendChild(row);return box;}
function openHead(label){var d=head(label),x=null,panel=document.getElementById('tl-panel');
 S.heads.forEach(function(h){if(h.label===label)x=h;});document.querySelectorAll('td.tl-cell').forEach(function(c){
  c.classList.toggle('tl-selected',c.getAttribute('data-label')===label);});
 panel.textContent='';panel.setAttribute('data-head',label);panel.appendChild(el('h2',{'id':'tl-head-label'},label));
 if(!d||!x){panel.appendChild(el('p',{},'no data for this head'));return;}
 var w=d.W||{},v=d.V||{},a=d.agreement||{},det=d.detectors||{};
 var sc=kv([['character of W',w.character,'character'],['cos(W, Q̄)',w.cosine,'cosine'],
  ['explained R² of W',w.explained,'explained'],['excess over the null',w.excess,'excess'],
  ['specific',w.specific,'specific'],['null z',w.z,'z'],['p',w.p,'p'],['q',w.q,'q'],['verdict',w.verdict,'verdict'],['interval',
  w.lo===undefined?null:fmt(w.lo)+' – '+fmt(w.hi),'interval'],['implied s·η',w.implied_s_lr,'implied_s_lr'],
  ['value path',v.character,'value_character'],['cos(value, its term)',v.cosine,'value_cosine'],
  ['rank corr. with prediction',a.rank_correlation,'rank_correlation'],['JS divergence',a.js_divergence,'js_divergence']]
  .concat(Object.entries(det).map(function(e){return ['TL detector: '+e[0].replace('_',' '),e[1],e[0]];})));
 sc.id='tl-head-scores';var top=el('div',{'class':'tl-row'});top.appendChild(sc);
 top.appendChild(shares('W (query-key): Shapley shares',d.W));top.appendChild(shares('Value path: Shapley shares',d.V));
 panel.appendChild(top);attention(panel,label,d.attention||{actual:[],scale:0});
 var pr=d.pairs||{};panel.appendChild(pairs('Query → key pairs ('+S.pair_tokens+' most frequent tokens)',pr.W,S.theory.W,
  label+' W','Q̄ (leading term)'));panel.appendChild(pairs('Value: input → output tokens',pr.V,S.theory.V,
  label+' value map',S.value_term+' (leading term)'));}
var spellings=null;  // a typed word (trimmed, lower case) -> the kept tokens spelt so
function findWord(q){var key=q.trim().toLowerCase();if(!key)return -1;if(!W)W=JSON.parse(
 document.getElementById('tl-words-data').textContent);if(!spellings){spellings=new Map();
 W.tokens.forEach(function(t,p){var k=t.trim().toLowerCase();if(!spellings.has(k))spellings.set(k,[]);spellings.get(k).push(p);});}
 var found=spellings.get(key)||[],exact=found.filter(function(p){return W.tokens[p]===q;});
 if(exact.length)return exact[0];  // else the most frequent token of that spelling
 return found.reduce(function(a,p){return a<0||W.counts[p]>W.counts[a]?p:a;},-1);}
function showWord(){var q=document.getElementById('tl-word').value,p=findWord(q),kind=document.getElementById('tl-word-kind').value,
 lists=document.getElementById('tl-word-lists'),text=document.getElementById('tl-word-text');lists.textContent='';text.textContent='';
 if(p<0){if(q.trim())lists.appendChild(el('p',{'class':'tl-note','id':'tl-word-unknown'},'"'+q.trim()+'" is not one of the '+
  W.tokens.length+' tokens the statistics keep: type a single token as the tokenizer spells it'));return;}
 var word=W.tokens[p].trim()||W.tokens[p],none=W.counts[p]?'an all-zero row in this statistic: no associations':
  'never occurs in the corpus: no associations';
 Object.keys(W.kinds).forEach(function(kd){var K=W.kinds[kd],top=K.top[p],b=el('div');b.appendChild(el('h3',{},K.heading));
  var ul=el('ul',{'class':'tl-assoc','data-kind':kd});for(var i=0;top&&i<top.length;i+=2){var li=el('li');
   li.appendChild(el('span',{'class':'tl-token'},W.tokens[top[i]]));li.appendChild(el('small',{},' '+fmt(top[i+1]/100)));
   li.title=W.scoring+' score '+fmt(top[i+1]/100*K.scale[p]);ul.appendChild(li);}
  if(!top)ul.appendChild(el('li',{'class':'tl-note'},K.note||none));b.appendChild(ul);lists.appendChild(b);});
 var K=W.kinds[kind],row=K.text[p];text.appendChild(el('p',{'class':'tl-note'},'the text shaded by its '+kind+
  ' association with "'+word+'" (the scale of the lists: 1 is full red, −1 full blue; unshaded: not scored)'));
 var line=el('div',{'class':'tl-shaded'});(S.text||S.tokens).forEach(function(tok,i){var c=W.text[i],
  v=c<0||!row?null:row[c],s=el('span',{},tok);paint(s,v===null?null:shade(v/100));s.title=v!==null?fmt(v/100):
  c<0?'not a kept token':!row?(K.note||none):'left out of the lists';line.appendChild(s);});text.appendChild(line);}
document.getElementById('tl-score').addEventListener('change',drawGrid);
document.getElementById('tl-word').addEventListener('input',showWord);
document.getElementById('tl-word-kind').addEventListener('change',showWord);
var lastHeight=0;
function postHeight(){var root=document.getElementById('tl-root');if(!root||window.parent===window)return;
 var h=Math.ceil(root.getBoundingClientRect().bottom+window.scrollY+parseFloat(getComputedStyle(document.body).marginBottom||0)+2);
 if(Math.abs(h-lastHeight)>1){lastHeight=h;window.parent.postMessage({tl_explorer_height:h},'*');}}
drawGrid();
function firstWord(){if(S.first_word&&findWord(S.first_word)>=0){document.getElementById('tl-word').value=S.first_word.trim();showWord();}}
if(document.getElementById('tl-words-data'))firstWord();else document.addEventListener('DOMContentLoaded',firstWord);
if(window.ResizeObserver)new ResizeObserver(postHeight).observe(document.getElementById('tl-root'));
setInterval(postHeight,500);  // also when no resize is observed: a frame measured while its host hid it
window.addEventListener('load',postHeight);postHeight();
window.addEventListener('message',function(e){  // the host says its theme: the frame sees no host variables
 if(e.source===window.parent&&e.data&&(e.data.tl_theme==='dark'||e.data.tl_theme==='light'))
  document.documentElement.setAttribute('data-tl-theme',e.data.tl_theme);});
})();
