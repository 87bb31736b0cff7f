// Images the next message carries: picked with the button, pasted into the message box or dropped
// on the composer, read as data URLs. They go to the server as OpenAI image_url parts; the server
// checks and decodes them (a bad one comes back as a 400, shown like any error).

const TYPES = ['image/png', 'image/jpeg', 'image/webp', 'image/gif', 'image/bmp'];

const readAsDataURL = (file) =>
  new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });

// strip: the element that shows the pending images; onError(text): a file the page will not send
export function attachments(strip, onError) {
  const pending = [];

  function render() {
    strip.replaceChildren(
      ...pending.map((url, i) => {
        const item = document.createElement('span');
        item.className = 'attachment';
        const img = document.createElement('img');
        img.src = url;
        img.alt = `attached image ${i + 1}`;
        const remove = document.createElement('button');
        remove.type = 'button';
        remove.className = 'link';
        remove.textContent = '×';
        remove.title = 'Remove this image';
        remove.addEventListener('click', () => {
          pending.splice(i, 1);
          render();
        });
        item.append(img, remove);
        return item;
      }),
    );
    strip.hidden = pending.length === 0;
  }

  return {
    async add(files) {
      for (const file of files) {
        if (!TYPES.includes(file.type)) onError(`${file.name || 'That file'} is not an image the server reads (PNG, JPEG, WebP, GIF or BMP).`);
        else pending.push(await readAsDataURL(file));
      }
      render();
    },
    take() {
      const out = pending.splice(0);
      render();
      return out;
    },
    get count() {
      return pending.length;
    },
  };
}
